"""The performance model's stored predictions beside the levels measured for the same config."""

from __future__ import annotations

from typing import NamedTuple

import pandas as pd

from tuner.report.dashboard_data.source import StudyData, open_store, with_retry
from tuner.spec.space import describe
from tuner.verdict import rules

__all__ = ["PVM_COLUMNS", "PredictedVsMeasured", "load_predicted_vs_measured",
           "predicted_vs_measured"]


class PredictedVsMeasured(NamedTuple):
    rows: pd.DataFrame  # one row per measured level whose configuration was predicted
    predicted: int  # prediction rows stored for the study (all configurations and levels)
    median_abs_error: float | None  # |predicted / measured - 1| over rows, as a fraction


PVM_COLUMNS = ["trial", "config", "concurrency", "predicted tok/s/GPU", "measured tok/s/GPU",
               "error %", "source"]


def predicted_vs_measured(data: StudyData, predictions: list) -> PredictedVsMeasured:
    """Join stored predictions to the measured levels of the same configuration and concurrency.
    Predictions stay predictions: nothing here mixes them into the trials' figures."""
    by_key = {(rules.config_key(p.params), p.concurrency): p for p in predictions}
    rows = []
    for t in data.trials:
        for m in t.measurements:
            p = by_key.get((rules.config_key(t.params), m.concurrency))
            if p is None or not m.output_tok_s_per_gpu:
                continue
            error = p.output_tok_s_per_gpu / m.output_tok_s_per_gpu - 1
            rows.append({"trial": t.number, "config": describe(t.params),
                         "concurrency": m.concurrency,
                         "predicted tok/s/GPU": p.output_tok_s_per_gpu,
                         "measured tok/s/GPU": m.output_tok_s_per_gpu,
                         "error %": 100 * error, "source": p.source})
    frame = pd.DataFrame(rows, columns=PVM_COLUMNS)
    median = (float(frame["error %"].abs().median()) / 100) if len(frame) else None
    return PredictedVsMeasured(frame, len(predictions), median)


def load_predicted_vs_measured(url: str, name: str) -> PredictedVsMeasured | None:
    def read() -> PredictedVsMeasured | None:
        store = open_store(url)
        try:
            study = store.get_study(name)
            if study is None:
                return None
            return predicted_vs_measured(StudyData(study, store.trials(name)),
                                         store.predictions(name))
        finally:
            store.close()

    return with_retry(read)
