from tuner.store.records import LevelMeasurement
from tuner.store.repository import (
    BudgetSpent,
    PredictionRecord,
    ServerRecord,
    Store,
    StoreError,
    StudyRecord,
    TrialRecord,
    mask_url,
    sqlite_file,
)

__all__ = ["BudgetSpent", "LevelMeasurement", "PredictionRecord", "ServerRecord", "Store",
           "StoreError", "StudyRecord", "TrialRecord", "mask_url", "sqlite_file"]
