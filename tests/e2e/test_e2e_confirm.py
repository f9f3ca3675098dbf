"""`tuner confirm` on real vLLM CPU servers: the top 3 trials measured again, each in a fresh
server, and the winner exported with both runs."""

from __future__ import annotations

import json
import sqlite3

import pytest

from tests.conftest import NO_VLLM, base_spec, run_tuner, vllm_available, write_yaml
from tuner.search import rules
from tuner.store import Store

pytestmark = pytest.mark.engine

# Three configurations that all run on the CPU build: only the batch limit differs.
SPACE = {"name": "three", "engine": "vllm",
         "parameters": {"tensor_parallel_size": {"values": [1]},
                        "max_batch_size": {"values": [4, 8, 16]}}}


@pytest.fixture(scope="module")
def confirmed(tmp_path_factory, tiny_model):
    if not vllm_available():
        pytest.fail(NO_VLLM)
    d = tmp_path_factory.mktemp("confirm")
    write_yaml(d / "space.yaml", SPACE)
    spec = base_spec(tiny_model, space="space.yaml", name="confirm-study")
    spec["workload"] = {"input_len": 32, "output_len": 32, "concurrency": [4],
                        "requests_per_level": 16, "warmup_requests": 2}
    write_yaml(d / "study.yaml", spec)
    run = run_tuner("run", "study.yaml", cwd=d)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    proc = run_tuner("confirm", "study.yaml", "--top", "3", cwd=d)
    (d / "confirm.out").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return d


def test_confirm_reruns_the_top_three_each_in_a_fresh_server(confirmed):
    with Store.open(f"sqlite:///{confirmed}/tuner.db", create=False) as store:
        trials = [t for t in store.trials("confirm-study") if t.state == "complete"]
    assert len(trials) == 3
    for t in trials:
        assert t.confirm_state in ("confirmed", "inconclusive", "differs"), t.confirm_reason
        assert [m.concurrency for m in t.confirmation] == [4]
        # A round is 16 completions; the timed ones started inside it (at most 4 were in flight
        # when it began: the closed loop never drains).
        assert 16 - 4 <= t.confirmation[0].requests <= 16
    connection = sqlite3.connect(confirmed / "tuner.db")
    servers = connection.execute("SELECT trial_id, pid, stopped_at FROM tuner_servers").fetchall()
    connection.close()
    by_trial: dict[int, list[int]] = {}
    for trial_id, pid, stopped_at in servers:
        assert stopped_at is not None
        by_trial.setdefault(trial_id, []).append(pid)
    # Each trial had two servers of its own: its first run and its confirmation.
    assert sorted(len(set(pids)) for pids in by_trial.values()) == [2, 2, 2]
    out = (confirmed / "confirm.out").read_text()
    assert out.count("confirm trial ") == 3


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
    again = run_tuner("confirm", "study.yaml", cwd=confirmed, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "no unconfirmed trial among the top 3" in again.stdout
