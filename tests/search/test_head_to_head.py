"""The finalists head to head: rounds paired in time give each challenger's ratio to the leader
with its interval; a drift that moves both rounds of a pair cancels; `tied` where the interval
holds 1; the study's pick, and why; and a real study on the fake engine that ends with one."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from tests.conftest import call_tuner
from tests.report.test_export import LEVEL
from tests.search.test_quality_gate import study_dir
from tuner.measure.stats import paired_ratio
from tuner.search.head_to_head import placements
from tuner.serve.hardware import Inventory
from tuner.store import HeadToHead, Store
from tuner.verdict.finalists import AHEAD, BEHIND, TIED, Finalist, Verdict, pick, settled, verdicts
from tuner.verdict.rules import winner


def finalist(number: int, tok_s: list[float], *, gpus: int = 1,
             ttft: float = 20.0) -> Finalist:
    trial = SimpleNamespace(number=number, gpus=gpus, params={"tensor_parallel_size": gpus})
    rounds = [replace(LEVEL, output_tok_s_per_gpu=v, ttft_p90_ms=ttft) for v in tok_s]
    return Finalist(trial, LEVEL, rounds=rounds)


def test_a_drift_that_moves_both_rounds_of_a_pair_cancels_in_their_ratio():
    # The machine slows by half over the run; the challenger is 10% ahead in every pair.
    drift = [1000, 900, 800, 700, 600, 500]
    ratio, low, high = paired_ratio(drift, [v * 1.1 for v in drift])
    assert ratio == pytest.approx(1.1) and low == pytest.approx(1.1)
    assert high == pytest.approx(1.1)
    # Unpaired, the same figures would not tell 10% from noise: their spread is 25%.
    with pytest.raises(ValueError, match="do not pair"):
        paired_ratio(drift, drift[:-1])


def test_each_challenger_is_ahead_behind_or_tied_by_its_interval():
    leader = finalist(0, [1000, 1020, 980, 1010])
    ahead = finalist(1, [1100, 1125, 1075, 1110])
    behind = finalist(2, [800, 830, 790, 805])
    tied = finalist(3, [1010, 990, 1000, 1030])
    found = {v.trial: v for v in verdicts(leader, [ahead, behind, tied])}
    assert found[1].call == AHEAD and found[2].call == BEHIND and found[3].call == TIED
    assert found[1].pairs == 4
    assert found[3].line(0) == ("trial 3 / trial 0: 1.005 [95% 0.968-1.044] over 4 pairs of "
                                "rounds: tied")


def test_a_tie_is_settled_only_once_its_interval_is_narrow():
    wide = Verdict(1, 1.0, 0.8, 1.25, 3)
    narrow = Verdict(1, 1.0, 0.98, 1.02, 8)
    assert not settled([wide], 0.05) and settled([narrow], 0.05)
    assert settled([Verdict(2, 1.3, 1.2, 1.4, 3)], 0.05)  # decided: ahead


def test_the_pick_is_a_challenger_only_when_ahead_and_between_ties_fewer_devices_then_ttft():
    leader = finalist(0, [1000, 1000, 1000], gpus=2, ttft=30)
    ahead = finalist(1, [1200, 1210, 1190])
    chosen, why = pick(leader, [ahead], verdicts(leader, [ahead]))
    assert chosen is ahead and why == "trial 1 is ahead of trial 0 by 20.0%"
    even = finalist(2, [1000, 1010, 990], gpus=1, ttft=40)
    chosen, why = pick(leader, [even], verdicts(leader, [even]))
    assert chosen is even and why == "tied with trial 0: chosen for fewer devices"
    same = finalist(3, [1000, 1010, 990], gpus=2, ttft=25)
    chosen, why = pick(leader, [same], verdicts(leader, [same]))
    assert chosen is same and "its lower TTFT p90 in the head-to-head (25 ms, lower beyond " \
        "the rounds' noise)" in why
    worse = finalist(4, [700, 710, 690], gpus=2)
    assert pick(leader, [worse], verdicts(leader, [worse]))[0] is leader


def test_between_ties_the_measurement_cannot_tell_apart_the_pick_is_the_first_measured():
    # TTFT rounds that cross: no difference beyond their noise, whichever mean is lower.
    leader = finalist(5, [1000, 1000, 1000, 1000], gpus=1)
    other = finalist(2, [1000, 1010, 990, 1000], gpus=1)
    for f, ttfts in ((leader, [30, 20, 40, 25]), (other, [25, 30, 20, 35])):
        f.rounds = [replace(m, ttft_p90_ms=t) for m, t in zip(f.rounds, ttfts, strict=True)]
    chosen, why = pick(leader, [other], verdicts(leader, [other]))
    assert chosen is other  # trial 2 was measured before trial 5, whatever the noise says
    assert why == ("tied with trial 5: neither throughput nor TTFT tells them apart here; "
                   "chosen as the first measured")


def test_finalists_share_a_cpu_node_and_take_their_own_gpus_only_where_they_fit():
    def ctx(kind: str, devices: int):
        inv = Inventory(kind=kind, type="x", devices=tuple(range(devices)), description="",
                        host="h")
        return SimpleNamespace(inventory=inv, adapter=SimpleNamespace(
            world_size=lambda p: p["tensor_parallel_size"]))

    two = [SimpleNamespace(params={"tensor_parallel_size": 1}),
           SimpleNamespace(params={"tensor_parallel_size": 2})]
    assert placements(ctx("cpu", 2), two) == [[0, 1], [0, 1]]
    assert placements(ctx("gpu", 4), two) == [[0], [1, 2]]
    assert placements(ctx("gpu", 2), two) is None  # 3 GPUs asked of 2: not side by side


def test_the_winner_is_the_head_to_heads_pick_while_it_stands(tmp_path):
    from tests.report.test_export import add_trial, study_store

    store = study_store(tmp_path)
    add_trial(store, 0, {"tensor_parallel_size": 1, "max_batch_size": 4}, 900.0, True)
    add_trial(store, 1, {"tensor_parallel_size": 1, "max_batch_size": 16}, 880.0, True)
    assert winner(store.get_study("s"), store.trials("s")).number == 0
    store.record_head_to_head("s", HeadToHead(
        leader=0, pick=1, reason="tied with trial 0: chosen for the lower TTFT p90", together=True,
        ratios=[{"trial": 1, "ratio": 0.99, "low": 0.95, "high": 1.03, "pairs": 5,
                 "verdict": TIED}], rounds=[]))
    study = store.get_study("s")
    assert study.head_to_head.pick == 1 and winner(study, store.trials("s")).number == 1


def two_finalist_study(tmp_path):
    """A study folder on the fake engine whose best two trials meet head to head: batch 4
    serves faster than batch 16."""
    import yaml

    landscape = {"default": {"ttft_s": 0.01, "itl_s": 0.004},
                 "rules": [{"match": {"max-num-seqs": 4}, "ttft_s": 0.006, "itl_s": 0.0025}]}
    d = study_dir(tmp_path, landscape)
    spec = yaml.safe_load((d / "study.yaml").read_text())
    spec["budget"]["confirm_top_k"] = 2
    spec["workload"].update(max_rounds=4, ci_target=0.05)
    spec["quality"] = {"enabled": False}
    (d / "study.yaml").write_text(yaml.safe_dump(spec))
    return d


def test_a_study_ends_with_its_finalists_head_to_head_on_the_fake_engine(tmp_path):
    d = two_finalist_study(tmp_path)
    run = call_tuner("run", "study.yaml", cwd=d)
    assert run.code == 0, run.stdout[-3000:] + run.stderr
    assert "head-to-head: 2 finalists, servers up together" in run.stdout
    with Store.open(f"sqlite:///{d / 'tuner.db'}", create=False) as store:
        study = store.get_study("test-study")
        trials = {t.params["max_batch_size"]: t for t in store.trials("test-study")}
    h = study.head_to_head
    # Batch 4 runs second and faster (so it is not pruned as below the incumbent).
    fast, slow = trials[4], trials[16]
    assert h.leader == fast.number and h.together
    (ratio,) = h.ratios
    assert ratio["trial"] == slow.number and ratio["verdict"] == BEHIND, ratio
    assert h.pick == fast.number and "behind" in h.reason
    # Every round stored with its time, alternating A B, B A.
    assert len(h.rounds) == 2 * ratio["pairs"]
    order = [r["trial"] for r in h.rounds[:4]]
    assert order == [fast.number, slow.number, slow.number, fast.number]
    assert all(r["at"] and r["tok_s_per_gpu"] > 0 for r in h.rounds)
    # The head-to-head is each finalist's confirmation too: one level, at its best load.
    for t in (fast, slow):
        assert t.confirm_state in ("confirmed", "inconclusive", "differs")
        (again,) = t.confirmation
        assert again.concurrency == 2 and again.rounds == ratio["pairs"]
        assert again.output_tok_s_ci95 is not None  # an interval over its rounds
    best = json.loads((d / "tuner-exports" / "test-study" / "best.json").read_text())
    assert best["trial"] == fast.number
    shown = call_tuner("best", cwd=d)
    assert f"head-to-head of 2 finalists (servers up together, rounds alternating): pick trial " \
        f"{fast.number}" in shown.stdout
    assert f"trial {slow.number} / trial {fast.number}: " in shown.stdout


def test_the_trial_page_draws_the_head_to_heads_rounds_in_time_order(tmp_path):
    from tests.report.test_export import add_trial, study_store
    from tuner.report import dashboard_data as dd

    store = study_store(tmp_path)
    add_trial(store, 0, {"tensor_parallel_size": 1, "max_batch_size": 4}, 900.0, True)
    add_trial(store, 1, {"tensor_parallel_size": 1, "max_batch_size": 16}, 880.0, True)
    add_trial(store, 2, {"tensor_parallel_size": 1, "max_batch_size": 64}, 500.0, True)
    rounds = [{"trial": t, "pair": p, "at": f"2026-12-07T10:0{2 * p + i}:00+00:00",
               "tok_s_per_gpu": 900.0 - 50 * p, "ttft_p90_ms": 20.0}
              for p in range(2) for i, t in enumerate((0, 1) if p % 2 == 0 else (1, 0))]
    store.record_head_to_head("s", HeadToHead(
        leader=0, pick=0, reason="every challenger is behind it", together=True,
        ratios=[{"trial": 1, "ratio": 0.97, "low": 0.95, "high": 0.99, "pairs": 2,
                 "verdict": BEHIND}], rounds=rounds))
    study, trials = store.get_study("s"), {t.number: t for t in store.trials("s")}
    frame = dd.head_to_head_frame(study, trials[1])
    assert list(frame.columns) == dd.H2H_COLUMNS and len(frame) == 4
    assert frame["at"].is_monotonic_increasing and list(frame["trial"]) == ["0", "1", "1", "0"]
    assert dd.head_to_head_frame(study, trials[2]) is None  # not a finalist
    assert dd.head_to_head_lines(study)[1] == ("  trial 1 / trial 0: 0.970 [95% 0.950-0.990] "
                                               "over 2 pairs of rounds: behind")


def test_finalists_that_cannot_be_up_together_meet_in_fresh_servers_in_a_mirrored_order(
        tmp_path, monkeypatch):
    from tuner.search import head_to_head

    d = two_finalist_study(tmp_path)
    # As on a GPU node too small for both finalists at once.
    monkeypatch.setattr(head_to_head, "placements", lambda ctx, trials: None)
    run = call_tuner("run", "study.yaml", cwd=d)
    assert run.code == 0, run.stdout[-3000:] + run.stderr
    assert "head-to-head: 2 finalists cannot be up together here: a fresh server each, in turn " \
        "(A B B A), 3 rounds each at its best load" in run.stdout
    with Store.open(f"sqlite:///{d / 'tuner.db'}", create=False) as store:
        study = store.get_study("test-study")
        trials = {t.params["max_batch_size"]: t for t in store.trials("test-study")}
    h = study.head_to_head
    fast, slow = trials[4], trials[16]
    assert h.leader == fast.number and not h.together
    (ratio,) = h.ratios
    assert ratio["trial"] == slow.number and ratio["pairs"] == 2 and ratio["unit"] == "servers"
    # Four servers, three rounds each, in the order A B B A.
    assert [r["trial"] for r in h.rounds] == \
        [fast.number] * 3 + [slow.number] * 6 + [fast.number] * 3
    assert [r["pair"] for r in h.rounds] == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3
    assert "over 2 pairs of servers" in run.stdout
    for t in (fast, slow):
        (again,) = t.confirmation
        assert again.rounds == 6  # both its servers' rounds: its confirmation
