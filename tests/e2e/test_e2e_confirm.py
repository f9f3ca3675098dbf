"""Confirmation on real vLLM CPU servers: at the end of `tuner run` (budget.confirm_top_k) the
top 2 of conftest's `real_study` (its two complete trials; the third crashed) meet head to head
(their fresh servers up together, rounds alternating), which is each one's confirmation too, and
the pick is exported with both runs; `tuner confirm` then finds nothing left to confirm."""

from __future__ import annotations

import json
import sqlite3

import pytest

from tests.conftest import REAL_STUDY, REQUESTS_PER_LEVEL, call_tuner
from tuner.store import Store
from tuner.verdict import rules

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def confirmed(real_study):
    """conftest's study, whose run ended by confirming its top 2."""
    return real_study.folder


def test_confirm_reruns_the_top_two_each_in_a_fresh_server(confirmed):
    with Store.open(f"sqlite:///{confirmed}/tuner.db", create=False) as store:
        trials = [t for t in store.trials(REAL_STUDY) if t.state == "complete"]
    assert len(trials) == 2
    ranked = sorted(trials, key=lambda t: t.objective, reverse=True)
    for t in ranked[:2]:
        assert t.confirm_state in ("confirmed", "inconclusive", "differs"), t.confirm_reason
        # The head-to-head measured each finalist again at the load of its best first-run level.
        best = max((m for m in t.measurements if m.meets_sla),
                   key=lambda m: m.output_tok_s_per_gpu)
        (again,) = t.confirmation
        assert again.concurrency == best.concurrency and again.rounds >= 3
        # Each round's timed completions started inside it (at most `concurrency` were in
        # flight when it began: the closed loop never drains).
        assert again.rounds * (REQUESTS_PER_LEVEL - again.concurrency) <= again.requests \
            <= again.rounds * REQUESTS_PER_LEVEL
    connection = sqlite3.connect(confirmed / "tuner.db")
    servers = connection.execute("SELECT trial_id, pid, stopped_at FROM tuner_servers").fetchall()
    connection.close()
    by_trial: dict[int, list[int]] = {}
    for trial_id, pid, stopped_at in servers:
        assert stopped_at is not None
        by_trial.setdefault(trial_id, []).append(pid)
    # Each finalist had two servers of its own: its first run and the head-to-head's; the crash
    # one.
    assert sorted(len(set(pids)) for pids in by_trial.values()) == [1, 2, 2]
    out = (confirmed / "run.out").read_text()
    assert "head-to-head: 2 finalists, servers up together" in out
    with Store.open(f"sqlite:///{confirmed}/tuner.db", create=False) as store:
        h = store.get_study(REAL_STUDY).head_to_head
    assert h.leader == ranked[0].number and h.pick in (ranked[0].number, ranked[1].number)
    (ratio,) = h.ratios
    assert ratio["trial"] == ranked[1].number and ratio["verdict"] in ("ahead", "behind", "tied")
    assert f"-> pick: trial {h.pick} ({h.reason})" in out


def test_the_winner_is_exported_with_both_runs(confirmed):
    with Store.open(f"sqlite:///{confirmed}/tuner.db", create=False) as store:
        trials = store.trials(REAL_STUDY)
        # The best confirmed trial; with only inconclusive confirmations, the best first run.
        study = store.get_study(REAL_STUDY)
        winner = rules.winner(study, trials)
    assert winner.confirm_state is not None
    record = json.loads(
        (confirmed / "tuner-exports" / REAL_STUDY / "best.json").read_text())
    assert record["trial"] == winner.number
    # Its one figure: the run that decided its verdict (`rules.figure`), and which run it is.
    shown = rules.figure(winner, study)
    assert record["objective"]["value"] == shown.value
    assert record["objective"]["source"] == shown.source
    assert [m["output_tok_s_per_gpu"] for m in record["measurements"]] == [
        m.output_tok_s_per_gpu for m in winner.measurements]
    assert record["confirmation"]["value"] == winner.confirm_objective
    assert [m["output_tok_s_per_gpu"] for m in record["confirmation"]["measurements"]] == [
        m.output_tok_s_per_gpu for m in winner.confirmation]


def test_best_shows_the_confirmation_and_confirming_again_reruns_nothing(confirmed):
    best = call_tuner("best", cwd=confirmed)
    assert best.code == 0, best.stderr
    assert "confirmation in a fresh server:" in best.stdout
    again = call_tuner("confirm", "study.yaml", "--top", "2", cwd=confirmed)
    assert again.code == 0, again.stderr
    assert "no unconfirmed trial among the top 2" in again.stdout
