"""The load search's decisions (`concurrency: auto`, `request_rates: auto`): double while the SLA
is met, bisect the bracket between the highest load that met it and the lowest that missed,
stop at the resolution or the bound; and what it reports it found."""

from __future__ import annotations

import pytest

from tests.conftest import write_yaml
from tuner.search.context import prepare
from tuner.search.load_search import (
    MAX_LEVELS,
    Bounds,
    bracket,
    most_levels,
    next_load,
    outcome,
)
from tuner.spec.study_spec import load_spec


def search(bounds: Bounds, meets) -> list[tuple[float, bool]]:
    """Run the search to its end against a curve that meets the SLA where `meets(load)`."""
    history: list[tuple[float, bool]] = []
    while (load := next_load(history, bounds)) is not None:
        history.append((load, meets(load)))
    return history


def test_the_search_doubles_while_the_sla_is_met_then_bisects_the_bracket():
    bounds = Bounds("concurrency", 1, bound=64, resolution=0.25)
    history = search(bounds, lambda c: c <= 11)
    # 8 met, 16 missed: 12 missed, 10 met, and 10..12 is within 25% of 10.
    assert [load for load, _ in history] == [1, 2, 4, 8, 16, 12, 10]
    assert outcome(history, bounds) == (
        10, "c=10 met the SLA and c=12 missed it, within 25%")


def test_the_bracket_closes_within_the_resolution_of_the_load_that_met_the_sla():
    bounds = Bounds("concurrency", 8, bound=4096, resolution=0.25)
    history = search(bounds, lambda c: c <= 700)
    low, high = bracket(history)
    assert low <= 700 < high and high - low <= 0.25 * low
    assert len(history) <= most_levels(bounds)


def test_the_search_stops_at_the_bound_when_every_load_meets_the_sla():
    bounds = Bounds("concurrency", 1, bound=12, bound_why="max batch x ranks: 12 in flight")
    history = search(bounds, lambda c: True)
    assert [load for load, _ in history] == [1, 2, 4, 8, 12]  # the last doubling is capped
    load, why = outcome(history, bounds)
    assert load == 12 and "bound (max batch x ranks: 12 in flight)" in why


def test_a_first_load_that_misses_ends_the_search_with_nothing_met():
    bounds = Bounds("concurrency", 4, bound=64)
    history = search(bounds, lambda c: False)
    assert history == [(4, False)]
    load, why = outcome(history, bounds)
    assert load is None and "lower workload.load_search.start" in why


def test_concurrency_is_whole_requests_and_the_start_never_exceeds_the_bound():
    assert next_load([], Bounds("concurrency", 2.7, bound=64)) == 2
    assert next_load([], Bounds("concurrency", 32, bound=16)) == 16
    # 4 met, 5 missed: no whole concurrency lies between.
    assert next_load([(4, True), (8, False), (6, False), (5, False)],
                     Bounds("concurrency", 1, bound=64, resolution=0.1)) is None


def test_request_rates_bisect_to_the_resolution_with_no_bound_of_their_own():
    bounds = Bounds("rate", 0.5, resolution=0.1)
    history = search(bounds, lambda r: r <= 5.3)
    low, high = bracket(history)
    assert low <= 5.3 < high and high - low <= 0.1 * low
    assert outcome(history, bounds)[1].startswith(f"{low:g} req/s met the SLA and")


def test_an_unbounded_search_stops_after_max_levels():
    bounds = Bounds("rate", 1)
    history = search(bounds, lambda r: True)
    assert len(history) == MAX_LEVELS
    assert f"stopped at {MAX_LEVELS} levels" in outcome(history, bounds)[1]


def test_a_miss_below_a_load_that_met_the_sla_is_noise_and_does_not_close_the_bracket():
    history = [(1, True), (2, False), (4, True)]
    assert bracket(history) == (4, None)
    assert next_load(history, Bounds("concurrency", 1, bound=64)) == 8


def test_a_search_cut_short_says_how_far_it_got():
    bounds = Bounds("concurrency", 1, bound=64)
    assert outcome([(1, True), (2, True)], bounds) == (
        2, "c=2 met the SLA; the search was cut short")


def test_bounds_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        Bounds("concurrency", 0)


# ---------------------------------------------------------------- a study, the fake engine

# Each token's gap grows 25 ms per request in flight over a 50 ms base: per-user speed is
# 1 / (0.05 + 0.025 c) tok/s (c=4: 6.7, c=5: 5.7, c=6: 5.0) and throughput c times that, so
# under a 5.7 tok/s floor c=4 meets the SLA and c=6 misses it, each by 25 ms a token: far more
# than a busy machine adds to a gap.
LOAD_MODEL = {"default": {"ttft_s": 0.01, "itl_s": 0.05, "itl_per_in_flight_s": 0.025}}


@pytest.fixture(scope="module")
def auto_study(tmp_path_factory):
    from tests.search.test_loop import landscape_study
    from tuner.search import loop
    from tuner.spec.study_spec import SLASpec

    tmp_path = tmp_path_factory.mktemp("auto")
    ctx = landscape_study(tmp_path, LOAD_MODEL, [4, 16], n_trials=2, workload={
        "concurrency": "auto", "load_search": {"resolution": 0.5}}, trial_timeout_s=180)
    ctx.spec.sla = SLASpec(ttft_p90_ms=1000, min_tok_s_per_user_p90=5.7)
    loop.run_study(ctx, n_trials=2)
    yield {t.params["max_batch_size"]: t for t in ctx.store.trials(ctx.name)}, ctx
    ctx.store.close()


def test_a_study_with_concurrency_auto_stores_each_trials_curve_and_its_load_at_the_sla(
        auto_study):
    trials, _ = auto_study
    searched = trials[16]
    assert searched.state == "complete" and searched.meets_sla
    # Doubling to the first miss (8), then bisecting 4..8: 6 missed, and 4..6 is within 50%.
    assert [m.concurrency for m in searched.measurements] == [1, 2, 4, 8, 6]
    assert [m.meets_sla for m in searched.measurements] == [True, True, True, False, False]
    assert searched.load_at_sla == 4
    assert searched.load_search == "c=4 met the SLA and c=6 missed it, within 50%"


def test_the_search_is_bounded_by_max_batch_times_ranks(auto_study):
    trials, _ = auto_study
    bounded = trials[4]  # max batch 4 x 1 rank: the most it runs at once
    assert [m.concurrency for m in bounded.measurements] == [1, 2, 4]
    assert bounded.load_at_sla == 4
    assert bounded.load_search == ("c=4 met the SLA at the search's bound (max batch x ranks: "
                                   "4 in flight)")


def test_the_objective_is_the_throughput_at_the_highest_load_that_met_the_sla(auto_study):
    trials, _ = auto_study
    for t in trials.values():
        at_sla = next(m for m in t.measurements if m.concurrency == t.load_at_sla)
        assert t.objective == at_sla.output_tok_s_per_gpu
        assert t.objective > max(m.output_tok_s_per_gpu for m in t.measurements
                                 if m.concurrency < t.load_at_sla)
        assert not t.skipped_levels  # a miss closes the bracket; nothing is "skipped"


def test_a_spec_with_concurrency_auto_and_no_max_batch_anywhere_is_refused(tmp_path):
    from tests.search.test_loop import landscape_study
    from tuner.search.trial import sweep_for
    from tuner.spec.errors import BadInput

    ctx = landscape_study(tmp_path, LOAD_MODEL, [4], n_trials=1, workload={
        "concurrency": "auto", "arrival": "poisson", "request_rates": [1.0]})
    with pytest.raises(BadInput, match="concurrency auto needs the most requests"):
        sweep_for(ctx, {})
    assert sweep_for(ctx, {"max_batch_size": 4}).cap == 4
    ctx.store.close()


def test_a_space_with_a_configuration_without_a_bound_is_refused_before_any_trial(tmp_path):
    """One rule, said at the start: not at the first configuration without a batch limit,
    halfway through a study (a study's spec fault stops it with exit 2 either way)."""
    from tests.search.test_loop import landscape_study
    from tuner.spec.errors import BadInput

    landscape_study(tmp_path, LOAD_MODEL, [4], n_trials=1,
                    workload={"concurrency": "auto"}).store.close()
    write_yaml(tmp_path / "space.yaml", {"name": "half", "engine": "vllm", "parameters": {
        "max_num_tokens": {"values": [256, 2048]},
        "max_batch_size": {"values": [4], "when": {"max_num_tokens": 256}}}})
    (tmp_path / "tuner.db").unlink()
    with pytest.raises(BadInput, match=r"concurrency auto needs the most requests .* the "
                       r"space's configuration .*2048.* has none"):
        prepare(load_spec(tmp_path / "study.yaml"), tmp_path / "study.yaml", storage_url=None,
                study_name=None, say=lambda _: None)
    assert not (tmp_path / "tuner.db").exists()  # refused before a database is created


def test_a_crashed_trial_keeps_its_failure_not_a_load_search_verdict(tmp_path):
    from tests.search.test_loop import landscape_study
    from tuner.search import loop

    ctx = landscape_study(tmp_path, {**LOAD_MODEL, "rules": [
        {"match": {"max-num-seqs": 4}, "fail": "crash"}]}, [4], n_trials=1,
        workload={"concurrency": "auto"})
    loop.run_study(ctx, n_trials=1)
    (trial,) = ctx.store.trials(ctx.name)
    assert (trial.state, trial.failure_kind) == ("failed", "crash")
    assert (trial.load_at_sla, trial.load_search) == (None, None)
    ctx.store.close()
