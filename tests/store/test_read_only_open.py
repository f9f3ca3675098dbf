"""`Store.open(url, create=False)` is a reader's: it never creates, migrates or writes."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.store.test_store import build_old_schema
from tuner.store import Store, StoreError


def _url(path: Path) -> str:
    return f"sqlite:///{path}"


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file in the folder and its content's hash: a write or a new file changes it."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.is_file()}


def test_a_reader_refuses_an_older_schema_in_one_line_and_leaves_it_byte_identical(tmp_path):
    db = tmp_path / "old.db"
    build_old_schema(db)
    before = _snapshot(tmp_path)
    with pytest.raises(StoreError) as excinfo:
        Store.open(_url(db), create=False)
    message = str(excinfo.value)
    assert message.splitlines() == [message]
    assert f"{db} has an older tuner schema (revision 0003" in message
    assert f"`tuner upgrade --storage sqlite:///{db}`" in message
    assert _snapshot(tmp_path) == before  # no migration, no WAL switch, no -wal or -shm file


def test_a_reader_creates_no_file_where_none_exists(tmp_path):
    with pytest.raises(StoreError, match="no study database at"):
        Store.open(_url(tmp_path / "none.db"), create=False)
    assert list(tmp_path.iterdir()) == []


def test_a_reader_of_an_up_to_date_database_writes_nothing(tmp_path):
    db = tmp_path / "tuner.db"
    Store.open(_url(db)).close()
    before = _snapshot(tmp_path)
    with Store.open(_url(db), create=False) as store:
        assert store.list_studies() == []
    assert _snapshot(tmp_path) == before


def test_tuner_upgrade_migrates_an_older_database_once_and_keeps_its_rows(tmp_path):
    db = tmp_path / "old.db"
    build_old_schema(db)
    proc = subprocess.run([sys.executable, "-m", "tuner.cli", "upgrade", "--storage", _url(db)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{db} is up to date"
    with Store.open(_url(db), create=False) as store:
        assert [m.concurrency for m in store.trial("s", 0).measurements] == [1, 4, 16]


def test_tuner_upgrade_refuses_a_missing_database_and_creates_nothing(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tuner.cli", "upgrade", "--storage",
                           _url(tmp_path / "none.db")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "no study database at" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_reader_that_stays_open_leaves_no_wal_or_shm_file_beside_the_database(tmp_path):
    db = tmp_path / "tuner.db"
    Store.open(_url(db)).close()  # a study's database: in WAL mode
    before = _snapshot(tmp_path)
    with Store.open(_url(db), create=False) as store:
        store.list_studies()
        # Still open, as the dashboard keeps it for hours: the folder is as it was.
        assert _snapshot(tmp_path) == before
