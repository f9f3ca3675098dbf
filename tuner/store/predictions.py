"""The `Store`'s predictions: what a model (the performance model) expects of each configuration."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, insert, select

from db.models import PredictionModel
from tuner.store.records import PredictionRecord
from tuner.store.rows import _PREDICTION_ROW, _now, _prediction_record
from tuner.store.session import StoreBase


class Predictions(StoreBase):
    """Stored predictions per study, source, engine and GPU type."""

    def save_predictions(
        self,
        study_name: str,
        rows: Sequence[dict[str, Any]],
        *,
        source: str,
        engine: str,
        gpu_type: str,
        calibration: str,
        replace_all: bool = False,
    ) -> int:
        """Store predictions of `source` (e.g. "perfmodel") for a study, in one transaction.

        Each row holds config_key, params, concurrency, fits, output_tok_s_per_gpu,
        tok_s_per_user, ttft_ms, meets_sla and reason. The rows of a configuration replace every
        stored prediction of that configuration (all its levels); with replace_all, every stored
        prediction of this study, source, engine and GPU type is replaced. The study need not
        exist yet. Returns the number of rows stored.
        """
        now = _now()
        values = [
            {**{k: r[k] for k in _PREDICTION_ROW}, "study_name": study_name, "source": source,
             "engine": engine, "gpu_type": gpu_type, "calibration": calibration,
             "created_at": now}
            for r in rows
        ]
        scope = (
            PredictionModel.study_name == study_name,
            PredictionModel.source == source,
            PredictionModel.engine == engine,
            PredictionModel.gpu_type == gpu_type,
        )
        with self._session(f"store predictions of {study_name!r}") as session:
            if replace_all:
                session.execute(delete(PredictionModel).where(*scope))
            else:
                keys = sorted({v["config_key"] for v in values})
                for i in range(0, len(keys), 500):
                    session.execute(delete(PredictionModel).where(
                        *scope, PredictionModel.config_key.in_(keys[i : i + 500])))
            if values:
                session.execute(insert(PredictionModel), values)
        return len(values)

    def predictions(self, study_name: str, *, source: str | None = None) -> list[PredictionRecord]:
        """A study's stored predictions (of one source, or all), by configuration and level."""
        query = select(PredictionModel).where(PredictionModel.study_name == study_name)
        if source is not None:
            query = query.where(PredictionModel.source == source)
        query = query.order_by(PredictionModel.id)
        with self._session(f"read predictions of {study_name!r}") as session:
            return [_prediction_record(row) for row in session.scalars(query)]

