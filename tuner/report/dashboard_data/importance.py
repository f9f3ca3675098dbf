"""Optuna's parameter importances over a study's complete trials, or why there are none."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tuner.report.dashboard_data.source import with_retry
from tuner.store import engine_options

__all__ = ["Importance", "param_importances"]


@dataclass
class Importance:
    values: dict[str, float]  # parameter -> share of the objective's variance, largest first
    complete: int  # complete Optuna trials the estimate rests on
    note: str | None  # why there are no values, or how far to trust them


_MIN_TRUSTED = 10


def param_importances(url: str, study_name: str) -> Importance:
    """Optuna's parameter importances (its default evaluator, PED-ANOVA) over the study's
    complete trials, read from the same storage. Explained instead of computed when there are
    too few trials or nothing varied."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    kwargs = engine_options(url)  # the store's: timeouts
    if not _optuna_set_up(url, kwargs):
        return Importance({}, 0, "Optuna's study is not set up in this database yet: "
                                 "importance needs the Optuna study that `tuner run` keeps "
                                 "beside tuner's tables.")
    try:
        # skip_table_creation: a reader never creates Optuna's tables.
        storage = with_retry(lambda: optuna.storages.RDBStorage(
            url, engine_kwargs=kwargs, skip_table_creation=True))
    except Exception as e:  # noqa: BLE001 (a reader explains, it does not crash the page)
        return Importance({}, 0, "Optuna's records in this database could not be read "
                                 f"({_one_line(e)[:200]}): importance needs the Optuna study "
                                 "that `tuner run` keeps beside tuner's tables.")
    try:
        return _importances(storage, study_name)
    finally:
        storage.engine.dispose()


def _optuna_set_up(url: str, kwargs: dict[str, Any]) -> bool:
    """Whether Optuna has finished setting up its tables here (its schema version stamped).
    Until then, opening an RDBStorage would stamp the version itself, even with
    skip_table_creation: a write from a reader, and a race with the `tuner run` doing it."""
    from sqlalchemy import create_engine, inspect, text
    from sqlalchemy.exc import SQLAlchemyError

    engine = create_engine(url, **kwargs)
    try:
        with engine.connect() as connection:
            tables = set(inspect(connection).get_table_names())
            if not {"alembic_version", "version_info"} <= tables:
                return False
            stamped = connection.execute(text("SELECT count(*) FROM alembic_version")).scalar()
            return bool(stamped)
    except SQLAlchemyError:
        return False
    finally:
        engine.dispose()


def _importances(storage: Any, study_name: str) -> Importance:
    import optuna
    from optuna.trial import TrialState

    try:
        study = with_retry(lambda: optuna.load_study(study_name=study_name, storage=storage))
        trials = with_retry(lambda: study.get_trials(deepcopy=False,
                                                     states=(TrialState.COMPLETE,)))
    except KeyError:
        return Importance({}, 0, f"Optuna has no study named {study_name!r} in this database, "
                                 "so there is nothing to rate.")
    except Exception as e:  # noqa: BLE001
        return Importance({}, 0, f"Optuna's study could not be read: {_one_line(e)}")
    n = len(trials)
    if n < 2:
        return Importance({}, n, "Importance needs at least 2 complete trials with an "
                                 f"objective; this study has {n}.")
    seen: dict[str, set[str]] = {}
    for t in trials:
        for k, v in t.params.items():
            seen.setdefault(k, set()).add(repr(v))
    if not any(len(values) > 1 for values in seen.values()):
        return Importance({}, n, f"The {n} complete trials all have the same parameter values: "
                                 "nothing varied, so nothing can be rated.")
    try:
        values = with_retry(lambda: optuna.importance.get_param_importances(study))
    except Exception as e:  # noqa: BLE001
        return Importance({}, n, f"Optuna could not rate the parameters: {_one_line(e)}")
    note = None
    if n < _MIN_TRUSTED:
        note = (f"Only {n} complete trials: with so few, importances are a rough hint, "
                "not a measurement.")
    return Importance(dict(values), n, note)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__
