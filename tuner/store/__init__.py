"""The study database: tuner's records beside Optuna's tables in one database.

`bootstrap` opens and checks a database and migrates its schema; `repository` is the `Store` of
studies, trials, measurements, predictions, servers and quality references and checks; `records`
holds the plain records it returns (and the budget rule); `rows` converts between rows and
records.

This package may import only `db`, `tuner.spec`, `tuner` itself and third-party libraries.
"""

from tuner.store.bootstrap import engine_options, mask_url, sqlite_file
from tuner.store.errors import BudgetSpent, ConfigurationTaken, StoreError
from tuner.store.records import (
    HeadToHead,
    LevelMeasurement,
    PredictionRecord,
    QualityCheck,
    QualityReference,
    ServerRecord,
    StudyRecord,
    TrialRecord,
)
from tuner.store.repository import Store

__all__ = ["BudgetSpent", "ConfigurationTaken", "HeadToHead", "LevelMeasurement",
           "PredictionRecord", "QualityCheck", "QualityReference", "ServerRecord", "Store",
           "StoreError", "StudyRecord", "TrialRecord", "engine_options", "mask_url",
           "sqlite_file"]
