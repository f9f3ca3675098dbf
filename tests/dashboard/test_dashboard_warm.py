"""`tuner dashboard` reads the database before it serves (dashboard/serve.py calls
`tuner_ui.warm`), so the first viewer does not wait for it; a write then makes the next viewer
read again (SYNTHETIC ROWS, tests.choose_studies)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the dashboard extra is not installed (make install)")

DASHBOARD = Path(__file__).resolve().parents[2] / "dashboard"
sys.path.insert(0, str(DASHBOARD))

import tuner_ui  # noqa: E402

from tests.choose_studies import h200_and_b200  # noqa: E402
from tuner.report import dashboard_data as dd  # noqa: E402


def test_warm_reads_every_study_so_a_first_viewer_reads_nothing(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    h200_and_b200(url)
    tuner_ui.warm(url)
    reads = []
    monkeypatch.setattr(dd, "read_study", lambda store, name: reads.append(name))
    version = dd.data_version(url)
    assert {tuner_ui.study(url, n, version).study.name for n in ("h200", "b200")} == {"h200",
                                                                                      "b200"}
    assert reads == []
    # A study's write moves the database's version: the next viewer reads that study again.
    os.utime(tmp_path / "tuner.db", ns=(1, 1))
    tuner_ui.study(url, "h200", dd.data_version(url))
    assert reads == ["h200"]


def test_warm_on_a_missing_database_creates_nothing_and_leaves_the_page_to_explain(tmp_path):
    url = f"sqlite:///{tmp_path / 'absent.db'}"
    tuner_ui.warm(url)
    assert list(tmp_path.iterdir()) == []
