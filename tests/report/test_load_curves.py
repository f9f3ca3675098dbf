"""Each trial's load curve as the dashboard draws it, and the load search's results as the
terminal's tables show them: the highest load that met the SLA, the open loop's achieved rate
beside the offered one, and how often the in-flight cap held a request back."""

from __future__ import annotations

import pytest

from tests.report.test_dashboard_data import P, StudyWriter, level
from tuner.report import dashboard_data as dd
from tuner.report.tables import LOAD_AT_SLA, measurements_frame, trials_frame

SEARCH = "c=8 met the SLA and c=12 missed it, within 50%"


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'tuner.db'}"


def searched_study(url: str) -> StudyWriter:
    """Trial 0 searched its load (measured 1, 2, 4, 8, 16, 12: 8 the highest that met the SLA);
    trial 1 swept a fixed list."""
    w = StudyWriter(url)
    curve = [level(1, 100.0, 300.0), level(2, 190.0, 280.0), level(4, 350.0, 200.0),
             level(8, 600.0, 120.0), level(16, 700.0, 30.0, meets=False, ttft_p90_ms=900.0),
             level(12, 650.0, 45.0, meets=False)]
    w.complete(0, P(1, batch=16), curve, load_at_sla=8, load_search=SEARCH)
    w.complete(1, P(2), [level(2, 300.0, 200.0), level(8, 900.0, 120.0, meets=False)])
    return w


def test_each_trials_curve_is_its_levels_in_order_of_load_with_the_load_at_the_sla_marked(url):
    searched_study(url)
    curves = dd.load_curves(dd.read_study(dd.open_store(url), "s"))
    frame = curves.frame
    first = frame[frame["trial"] == 0]
    assert first["load"].tolist() == [1, 2, 4, 8, 12, 16]  # drawn by load
    assert first["order"].tolist() == [0, 1, 2, 3, 5, 4]  # as the search measured them
    assert first.loc[first["at SLA"], "load"].tolist() == [8]
    assert set(first[LOAD_AT_SLA]) == {8} and set(first["load search"]) == {SEARCH}
    # A fixed sweep's highest level that met the SLA is marked the same way.
    second = frame[frame["trial"] == 1]
    assert second.loc[second["at SLA"], "load"].tolist() == [2]
    assert (curves.load, curves.ttft_p90_ms, curves.min_tok_s_per_user_p90) == (
        "concurrency", 500.0, 50.0)


def test_open_loop_curves_are_drawn_against_the_offered_rate(url):
    w = StudyWriter(url)
    w.complete(0, P(), [level(64, 500.0, 140.0, request_rate=rate,
                              achieved_request_rate=rate * 0.99, capped_requests=capped)
                        for rate, capped in ((2.0, 0), (4.0, 0), (8.0, 12))],
               load_at_sla=8.0, load_search="8 req/s met the SLA at the search's bound")
    curves = dd.load_curves(dd.read_study(dd.open_store(url), "s"))
    assert curves.load == "req/s"
    assert curves.frame["load"].tolist() == [2.0, 4.0, 8.0]
    assert curves.frame["cap engaged"].tolist() == [False, False, True]
    # The trial page's level table puts the delivered rate beside the offered one.
    rows = dd.levels_frame(dd.open_store(url).trial("s", 0))
    assert rows[["rate req/s", "sent req/s", "waited for cap"]].values.tolist() == [
        [2.0, 1.98, 0], [4.0, 3.96, 0], [8.0, 7.92, 12]]


def test_no_measured_level_means_no_curve(url):
    w = StudyWriter(url)
    w.fail(0, P(), "crash", "Segfault")
    assert dd.load_curves(dd.read_study(dd.open_store(url), "s")) is None


def test_the_tables_show_the_load_at_the_sla_and_the_open_loops_delivered_rate(url):
    searched_study(url)
    trials = dd.open_store(url).trials("s")
    assert trials_frame(trials)[LOAD_AT_SLA].tolist() == [8, 2]
    assert dd.trials_frame(dd.read_study(dd.open_store(url), "s"))[LOAD_AT_SLA].tolist() == [
        8.0, 2.0]
    rows = measurements_frame([level(64, 500.0, 140.0, request_rate=8.0,
                                     achieved_request_rate=6.5, capped_requests=12)])
    assert rows[["request_rate", "achieved_request_rate", "capped_requests"]].values.tolist() \
        == [[8.0, 6.5, 12]]
