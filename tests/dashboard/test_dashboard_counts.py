"""Captions computed from what is drawn (issue 48, check 2): each chart's caption counts the
marks the chart was sent, and no page says `None` or `nan`, in its text or in a table's cells,
on a study where trials failed, were pruned, failed the quality gate or are still running."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("streamlit", reason="the dashboard extra is not installed (make install)")

from tests.dashboard.test_dashboard_app import (  # noqa: E402
    every_view,
    mark_data,
    mark_rows,
    open_page,
    show_tab,
    shown,
    sqlite_url,
    text,
)
from tests.report.test_dashboard_data import (  # noqa: E402
    P,
    StudyWriter,
    _prediction,
    level,
    troubled_study,
)
from tuner.report import dashboard_data as dd  # noqa: E402
from tuner.store import Store  # noqa: E402


def count(pattern: str, page: str) -> int:
    """The number the page's text gives where `pattern` (one group of digits) matches."""
    found = re.search(pattern, page)
    assert found, f"{pattern!r} is not in the page:\n{page}"
    return int(found.group(1).replace(",", ""))


@pytest.fixture
def url(tmp_path) -> str:
    url = sqlite_url(tmp_path / "tuner.db")
    troubled_study(url)
    return url


def test_the_pareto_caption_counts_the_levels_and_the_front_the_chart_draws(monkeypatch, url):
    at = open_page(monkeypatch, url, "views/study.py", study="s")
    for log_x in (True, False):
        at.toggle(key="pareto_log").set_value(log_x).run()
        page = text(at)
        pareto_points, pareto_front = mark_rows(at, "point")[0], mark_rows(at, "line")[0]
        assert count(r"(\d+) measured levels? drawn", page) == pareto_points == 9
        assert count(r"(\d+) on the Pareto front", page) == pareto_front
        # The level where every request failed is said apart, not counted in.
        assert count(r"(\d+) more where every request failed", page) == 1


def test_the_progress_caption_counts_the_trials_the_chart_draws_and_those_at_zero(monkeypatch,
                                                                                 url):
    at = open_page(monkeypatch, url, "views/study.py", study="s")
    for by in ("trial", "time"):
        at.segmented_control(key="progress_by").set_value(by).run()
        page = text(at)
        dots = mark_data(at, "point")[1]  # the Pareto chart's first, then the progress chart's
        assert count(r"(\d+) finished trials? drawn", page) == dots.num_rows == 7
        at_zero = sum(v == 0 for v in dots.column("figure").to_pylist())
        assert count(r"(\d+) trials? without a figure", page) == at_zero


def test_the_load_curve_caption_counts_the_levels_and_trials_drawn_against_each_measure(
        monkeypatch, url):
    at = show_tab(open_page(monkeypatch, url, "views/study.py", study="s"), "Load curves")
    # The level where every request failed has a throughput (0), and no latency to draw.
    for y, levels in ((dd.TOK_GPU, 10), ("TTFT p90 ms", 9), (dd.USER_P90, 9)):
        at.radio(key="curve_y").set_value(y).run()
        page = text(at)
        dots = mark_data(at, "point")[-1]
        assert count(r"(\d+) measured levels? of \d+ trials? drawn", page) == dots.num_rows \
            == levels
        assert count(r"measured levels? of (\d+) trials? drawn", page) == len(
            set(dots.column("trial").to_pylist())) == 5


def test_the_importance_caption_counts_the_configurations_rated_and_the_bars(monkeypatch,
                                                                            url):
    with Store.open(url, create=False) as store:
        complete = {dd.describe(t.params) for t in store.trials("s") if t.state == "complete"}
    at = show_tab(open_page(monkeypatch, url, "views/study.py", study="s"),
                  "Parameter importance")
    page = text(at)
    assert count(r"over the (\d+) complete configurations", page) == len(complete) == 3
    assert count(r"\((\d+) parameters? rated\)", page) == mark_rows(at, "bar")[-1]


def test_the_predicted_caption_counts_the_levels_the_chart_draws(monkeypatch, url):
    Store.open(url).save_predictions(
        "s", [_prediction(P(1, batch=4), 2, 600.0), _prediction(P(1, batch=4), 8, 1200.0),
              _prediction(P(2), 8, 800.0)],
        source="perfmodel", engine="vllm", gpu_type="cpu", calibration="published.csv")
    at = show_tab(open_page(monkeypatch, url, "views/study.py", study="s"),
                  "Predicted vs measured")
    assert count(r"(\d+) measured levels? with a stored prediction", text(at)) == \
        mark_rows(at, "circle")[-1] == 3


def test_the_compare_and_choose_captions_count_the_levels_their_charts_draw(monkeypatch, url):
    w = StudyWriter(url, "t", gpu_type="cpu")
    w.complete(0, P(2), [level(8, 5000.0, 90.0), level(64, 9000.0, 60.0)])
    for page in ("views/compare.py", "views/choose.py"):
        at = open_page(monkeypatch, url, page)
        for log_x in (True, False):
            at.toggle(key="compare_log" if "compare" in page else "choose_log").set_value(
                log_x).run()
            drawn = count(r"(\d+) measured levels? of \d+ studies drawn", text(at))
            assert drawn == mark_rows(at, "point")[0] == 11, (page, log_x)


NONE = re.compile(r"\b(None|nan|NaN)\b")


def test_no_page_says_none_or_nan_in_its_text_or_its_tables(monkeypatch, url):
    for where, at in every_view(monkeypatch, url):
        said = {element: NONE.search(body).group(0) for element, body in shown(at).items()
                if NONE.search(body)}
        assert said == {}, where


def test_the_pareto_legend_names_the_outcome_of_each_drawn_trial(monkeypatch, url):
    # Pruned and failed trials' levels are drawn, and the legend says which marks they are.
    at = open_page(monkeypatch, url, "views/study.py", study="s")
    points = mark_data(at, "point")[0]
    drawn = set(points.column("trial outcome").to_pylist())
    assert {"complete", "pruned", "failed"} <= drawn
    spec = json.loads(at.get("vega_lite_chart")[0].proto.spec)
    dots = next(layer for layer in spec["layer"] if "shape" in layer.get("encoding", {}))
    shape = dots["encoding"]["shape"]
    assert shape["field"] == "trial outcome" and shape["legend"]["title"] == "trial"
    assert set(shape["scale"]["domain"]) == {"complete", "pruned", "failed"}
