"""`tuner confirm` on real vLLM CPU servers: the top 2 of 3 trials measured again, each in a
fresh server, and the winner exported with both runs."""

from __future__ import annotations

import json
import sqlite3

import pytest

from tests.conftest import run_tuner
from tuner.search import rules
from tuner.store import Store

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def confirmed(parallel_study):
    """conftest's study of three configurations (only the batch limit differs), after
    `tuner confirm --top 2`."""
    return parallel_study.folder


def test_confirm_reruns_the_top_two_each_in_a_fresh_server(confirmed):
    with Store.open(f"sqlite:///{confirmed}/tuner.db", create=False) as store:
        trials = [t for t in store.trials("confirm-study") if t.state == "complete"]
    assert len(trials) == 3
    ranked = sorted(trials, key=lambda t: t.objective, reverse=True)
    for t in ranked[:2]:
        assert t.confirm_state in ("confirmed", "inconclusive", "differs"), t.confirm_reason
        assert [m.concurrency for m in t.confirmation] == [4]
        # A round is 16 completions; the timed ones started inside it (at most 4 were in flight
        # when it began: the closed loop never drains).
        assert 16 - 4 <= t.confirmation[0].requests <= 16
    assert ranked[2].confirm_state is None and ranked[2].confirmation == []
    connection = sqlite3.connect(confirmed / "tuner.db")
    servers = connection.execute("SELECT trial_id, pid, stopped_at FROM tuner_servers").fetchall()
    connection.close()
    by_trial: dict[int, list[int]] = {}
    for trial_id, pid, stopped_at in servers:
        assert stopped_at is not None
        by_trial.setdefault(trial_id, []).append(pid)
    # Each confirmed trial had two servers of its own: its first run and its confirmation.
    assert sorted(len(set(pids)) for pids in by_trial.values()) == [1, 2, 2]
    out = (confirmed / "confirm.out").read_text()
    assert out.count("confirm trial ") == 2


def test_the_winner_is_exported_with_both_runs(confirmed):
    with Store.open(f"sqlite:///{confirmed}/tuner.db", create=False) as store:
        trials = store.trials("confirm-study")
        # The best confirmed trial; with only inconclusive confirmations, the best first run.
        winner = rules.winner(store.get_study("confirm-study"), trials)
    assert winner.confirm_state is not None
    record = json.loads(
        (confirmed / "tuner-exports" / "confirm-study" / "best.json").read_text())
    assert record["trial"] == winner.number
    assert record["objective"]["value"] == winner.objective
    assert [m["output_tok_s_per_gpu"] for m in record["measurements"]] == [
        m.output_tok_s_per_gpu for m in winner.measurements]
    assert record["confirmation"]["value"] == winner.confirm_objective
    assert [m["output_tok_s_per_gpu"] for m in record["confirmation"]["measurements"]] == [
        m.output_tok_s_per_gpu for m in winner.confirmation]


def test_best_shows_the_confirmation_and_confirming_again_reruns_nothing(confirmed):
    best = run_tuner("best", cwd=confirmed, timeout=60)
    assert best.returncode == 0, best.stderr
    assert "confirmation in a fresh server:" in best.stdout
    again = run_tuner("confirm", "study.yaml", "--top", "2", cwd=confirmed, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "no unconfirmed trial among the top 2" in again.stdout
