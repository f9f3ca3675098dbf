"""Where the dashboard reads from: the storage URL, retried read-only reads, and a data version."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.exc import OperationalError

from tuner.spec.study_spec import DEFAULT_STORAGE
from tuner.store import QualityReference, Store, StoreError, StudyRecord, TrialRecord, sqlite_file

__all__ = ["STORAGE_ENV", "StudyData", "data_version", "open_store", "read_studies",
           "read_study", "sqlite_file", "storage_url", "with_retry"]

# `tuner dashboard` passes the storage URL to the Streamlit app in this variable: no shell
# quoting, and a PostgreSQL password stays out of the process list.
STORAGE_ENV = "TUNER_DASHBOARD_STORAGE"

T = TypeVar("T")


def storage_url() -> str:
    """The database the dashboard reads: set by `tuner dashboard --storage`, else the default."""
    return os.environ.get(STORAGE_ENV) or DEFAULT_STORAGE


def _is_locked(e: BaseException) -> bool:
    text = str(e).lower()
    return "database is locked" in text or "database table is locked" in text or "busy" in text


def with_retry(read: Callable[[], T], *, attempts: int = 6, first_delay_s: float = 0.05) -> T:
    """`read()`, retried briefly while another process holds an SQLite lock (a study writing or
    checkpointing). Any other error, or a lock that outlasts the retries, is raised as is."""
    delay = first_delay_s
    for attempt in range(attempts):
        try:
            return read()
        except (StoreError, OperationalError) as e:
            if attempt == attempts - 1 or not _is_locked(e):
                raise
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


def open_store(url: str) -> Store:
    """The store, opened for reading: a missing or foreign database raises StoreError (one line,
    the store's own message), never creates one."""
    return with_retry(lambda: Store.open(url, create=False))


def data_version(url: str, *, now: float | None = None, period_s: float = 5.0) -> tuple:
    """A value that changes whenever the database's contents may have changed: cache keys.

    For an SQLite file, the size and modification time of the file and of its write-ahead log
    (every commit appends to the log; a checkpoint rewrites the file). An empty log counts as
    none: it holds no data, and every read by the dashboard creates one and removes it. For a
    server database, the current `period_s` time bucket, so pages re-read at most that often.
    """
    path = sqlite_file(url)
    if path is None:
        return ("time", int((time.time() if now is None else now) // period_s))
    version: list[Any] = ["sqlite"]
    for p in (path, path.with_name(path.name + "-wal")):
        try:
            st = p.stat()
        except OSError:
            st = None
        empty_log = st is not None and p != path and st.st_size == 0
        version += [None, None] if st is None or empty_log else [st.st_mtime_ns, st.st_size]
    return tuple(version)


@dataclass
class StudyData:
    """One study as stored: its record, every trial by number, and its quality gate's
    reference answers (None: none stored)."""

    study: StudyRecord
    trials: list[TrialRecord]
    reference: QualityReference | None = None


def read_study(store: Store, name: str) -> StudyData | None:
    study = with_retry(lambda: store.get_study(name))
    if study is None:
        return None
    return StudyData(study, with_retry(lambda: store.trials(name)),
                     with_retry(lambda: store.reference(name)))


def read_studies(store: Store) -> list[StudyData]:
    studies = with_retry(store.list_studies)
    return [StudyData(s, with_retry(lambda s=s: store.trials(s.name)),
                      with_retry(lambda s=s: store.reference(s.name))) for s in studies]
