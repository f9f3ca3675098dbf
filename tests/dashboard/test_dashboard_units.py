"""A study in its own units (issue 48, check 3): a CPU study's pages say per core, never GPU, in
every text, label, help, option, table column and cell and chart (its titles, fields and
tooltips); a GPU study's say per GPU; pages that set both side by side say per device, and the
CPU study's own figures there stay per core."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("streamlit", reason="the dashboard extra is not installed (make install)")

from tests.dashboard.test_dashboard_app import (  # noqa: E402
    every_view,
    metrics,
    open_page,
    shown,
    sqlite_url,
    text,
)
from tests.report.test_dashboard_data import P, StudyWriter, level, troubled_study  # noqa: E402

GPU = re.compile(r"GPU")


def saying_gpu(at) -> dict[str, str]:
    """The elements of the page that say GPU, each with the line that does."""
    return {where: next(line for line in body.splitlines() if GPU.search(line))
            for where, body in shown(at).items() if GPU.search(body)}


def test_every_page_of_a_cpu_study_says_per_core_and_never_gpu(monkeypatch, tmp_path):
    url = sqlite_url(tmp_path / "tuner.db")
    troubled_study(url, gpu_type="cpu")
    for where, at in every_view(monkeypatch, url):
        assert saying_gpu(at) == {}, where
    at = open_page(monkeypatch, url, "views/study.py", study="s")
    assert metrics(at)["best tok/s/core"] == "1,300"
    assert "Throughput per core against per-user speed" in text(at)
    at = open_page(monkeypatch, url, "views/trial.py", study="s", trial="4")
    assert "760 tok/s/core (95% interval)" in text(at)  # the search's reason, said per core
    assert metrics(at)["cores"] == "2"


def test_the_same_pages_of_a_gpu_study_say_per_gpu(monkeypatch, tmp_path):
    url = sqlite_url(tmp_path / "tuner.db")
    troubled_study(url, gpu_type="H200")
    said = {where: saying_gpu(at) for where, at in every_view(monkeypatch, url)}
    for where in ("views/study.py", "views/study.py · Progress", "views/study.py · Trials",
                  "views/study.py · Load curves", "views/overview.py", "views/choose.py",
                  "trial 2", "trial 4"):
        assert said[where], where
    at = open_page(monkeypatch, url, "views/study.py", study="s")
    assert metrics(at)["best tok/s/GPU"] == "1,300"


def two_studies(url: str, second_gpu_type: str) -> None:
    """A CPU study `s` and another, `t`, on `second_gpu_type`."""
    troubled_study(url, gpu_type="cpu")
    w = StudyWriter(url, "t", gpu_type=second_gpu_type)
    w.complete(0, P(2), [level(8, 5000.0, 90.0), level(64, 9000.0, 60.0)])


def test_pages_that_set_two_cpu_studies_side_by_side_say_per_core(monkeypatch, tmp_path):
    url = sqlite_url(tmp_path / "tuner.db")
    two_studies(url, "cpu")
    for page in ("views/overview.py", "views/compare.py", "views/choose.py"):
        at = open_page(monkeypatch, url, page)
        assert saying_gpu(at) == {}, page
    table = open_page(monkeypatch, url, "views/compare.py").dataframe[0].value
    assert {"best tok/s/core", "cores", "hardware"} <= set(table.columns)


def test_pages_that_set_a_cpu_beside_a_gpu_study_say_per_device(monkeypatch, tmp_path):
    url = sqlite_url(tmp_path / "tuner.db")
    two_studies(url, "H200")
    for page in ("views/overview.py", "views/compare.py"):
        at = open_page(monkeypatch, url, page)
        assert {"best tok/s/device", "hardware"} <= set(at.dataframe[0].value.columns), page
        assert "GPU type" not in at.dataframe[0].value.columns
    # The CPU study's own links and card keep its unit: per core.
    at = open_page(monkeypatch, url, "views/overview.py")
    assert any("best 1,300 tok/s/core" in link.proto.label for link in at.get("page_link"))
    at = open_page(monkeypatch, url, "views/choose.py")
    at.number_input(key="choose_user").set_value(200.0).run()  # only the CPU study reaches it
    assert metrics(at)["tok/s/core"] == "450"  # trial 2's confirmation, at c=2
    assert metrics(at)["hardware · engine"] == "cpu · vllm"
