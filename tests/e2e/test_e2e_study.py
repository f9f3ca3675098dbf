"""A real study of real vLLM (CPU build) trials, end to end, and what it leaves behind.

The study (conftest's `real_study`) has exactly three configurations on a 2-core node, so its
3-trial budget runs them all: two TP1 ones, each searching its load up to its batch limit, and TP2
with expert parallel, which really crashes in vLLM's CPU fused-MoE kernel at the first request.
Tens of seconds per server: marked `engine`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time

import optuna
import pytest
import yaml

from tests.conftest import REAL_STUDY, REQUESTS_PER_LEVEL, call_tuner
from tuner.measure.metrics import UNUSABLE_VIOLATION
from tuner.store import Store

pytestmark = [
    pytest.mark.engine,
    pytest.mark.usefixtures("vllm_installed"),
]

@pytest.fixture(scope="module")
def study_dir(real_study):
    return real_study.folder


def _store(d) -> Store:
    return Store.open(f"sqlite:///{d}/tuner.db", create=False)


def test_every_configuration_ran_for_real_and_the_crash_is_recorded(study_dir):
    trials = _store(study_dir).trials(REAL_STUDY)
    assert len(trials) == 3
    by_config = {(t.params["tensor_parallel_size"], t.params.get("max_batch_size")): t
                 for t in trials}
    assert set(by_config) == {(1, 2), (1, 4), (2, None)}

    crashed = by_config[(2, None)]
    assert crashed.params["enable_expert_parallel"] is True
    assert crashed.state == "failed"
    assert crashed.failure_kind == "crash"
    assert "Segfault" in crashed.failure_reason
    assert crashed.log_tail  # the evidence is kept with the trial

    for cfg in [(1, 2), (1, 4)]:
        t = by_config[cfg]
        assert t.state == "complete", (cfg, t.failure_kind, t.failure_reason)
        for m in t.measurements:
            # A round is REQUESTS_PER_LEVEL completions, timed when they started inside it (the
            # closed loop never drains, so up to `concurrency` were in flight as it began).
            assert m.errors == 0
            assert REQUESTS_PER_LEVEL - m.concurrency <= m.requests <= REQUESTS_PER_LEVEL
            assert m.output_tokens == m.requests * 32  # counted from the server's usage
            assert m.output_tok_s > 0 and m.ttft_p50_ms > 0
            assert m.output_tok_s_per_gpu == pytest.approx(m.output_tok_s)  # one core
        assert t.engine_version and t.engine_version.startswith("0.32")


def test_optuna_sees_the_same_outcomes_with_the_sla_as_constraints(study_dir):
    """Measured trials carry the SLA as constraints; a crash or an infeasible sample is, for
    the sampler, a trial that violates a constraint (so TPE steers away from it)."""
    study = optuna.load_study(study_name=REAL_STUDY, storage=f"sqlite:///{study_dir}/tuner.db")
    # Every trial but a grid point that proposed a configuration already being measured.
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials
               if not t.user_attrs.get("repeat_of_running"))
    unusable = [t for t in study.trials if t.user_attrs.get("failure_kind")]
    assert {t.user_attrs["failure_kind"] for t in unusable} >= {"crash"}
    for t in unusable:
        assert t.value == 0.0 and max(t.constraints.values()) == UNUSABLE_VIOLATION
    measured = [t for t in study.trials if t not in unusable and "repeat_of" not in t.user_attrs]
    assert len(measured) == 2
    for t in measured:
        assert set(t.constraints) >= {"ttft_p90_ms", "tok_s_per_user_p90", "errors"}
        assert all(v <= 0 for v in t.constraints.values()) == t.user_attrs["meets_sla"]


def test_the_run_prints_the_winner_and_exports_it(study_dir):
    out = (study_dir / "run.out").read_text()
    assert "best of study test-study" in out
    export = study_dir / "tuner-exports" / REAL_STUDY
    record = json.loads((export / "best.json").read_text())
    assert record["schema_version"] == 8
    assert record["engine"]["name"] == "vllm" and record["engine"]["version"].startswith("0.32")
    assert record["objective"]["meets_sla"] is True
    assert record["provenance"]["tuner_version"]
    (winner,) = [t for t in _store(study_dir).trials(REAL_STUDY) if t.number == record["trial"]]
    assert [m["concurrency"] for m in record["measurements"]] == [
        m.concurrency for m in winner.measurements]
    config = yaml.safe_load((export / "config.yaml").read_text())
    assert config == record["launch"]["config"]
    assert config["tensor-parallel-size"] == record["parameters"]["tensor_parallel_size"]


def test_rerunning_the_study_runs_nothing_twice(study_dir):
    before = len(_store(study_dir).trials(REAL_STUDY))
    proc = call_tuner("run", "study.yaml", cwd=study_dir)
    assert proc.code == 0, proc.stderr
    assert "3 of 3 trials done" in proc.stdout
    assert len(_store(study_dir).trials(REAL_STUDY)) == before


def test_status_best_and_export_commands(study_dir):
    status = call_tuner("status", cwd=study_dir)
    assert status.code == 0 and "crash: Segfault" in status.stdout
    best = call_tuner("best", cwd=study_dir)
    assert best.code == 0 and "SLA met" in best.stdout
    exp = call_tuner("export", "--format", "json", "--out", "again", cwd=study_dir)
    assert exp.code == 0
    assert json.loads((study_dir / "again" / "best.json").read_text())["trial"] >= 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_vllm_serve_runs_the_exported_config_unchanged(study_dir, tiny_model, tmp_path):
    """What a deploy pipeline does: `vllm serve MODEL --config config.yaml`, then a request."""
    import urllib.error
    import urllib.request

    export = study_dir / "tuner-exports" / REAL_STUDY
    record = json.loads((export / "best.json").read_text())
    port = _free_port()
    vllm = os.path.join(os.path.dirname(os.sys.executable), "vllm")
    env = {**os.environ, **record["launch"]["env"]}
    log = tmp_path / "vllm-serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [vllm, "serve", str(tiny_model), "--config", str(export / "config.yaml"),
             "--host", "127.0.0.1", "--port", str(port)],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def tail() -> str:
        return "\n".join(log.read_text(errors="replace").splitlines()[-60:])

    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert server.poll() is None, f"vllm serve exited with the exported config:\n{tail()}"
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health")
                break
            except OSError:
                time.sleep(1)
        else:  # never ready: say so, rather than send the request to a server still starting
            pytest.fail(f"vllm serve not ready after 180 s with the exported config:\n{tail()}")
        body = json.dumps({"model": str(tiny_model), "prompt": "Tensor parallelism",
                           "max_tokens": 8}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            reply = json.loads(urllib.request.urlopen(req).read())
        except urllib.error.HTTPError as e:
            pytest.fail(f"HTTP {e.code} {e.read()[:500]!r} from the exported config's server:\n"
                        f"{tail()}")
        assert reply["usage"]["completion_tokens"] == 8
        assert reply["choices"][0]["text"]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
