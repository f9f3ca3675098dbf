"""A configuration with replicas: a study searches `replicas` x `router_policy` like any other
knob, each such trial serves its replicas behind the real router on disjoint cores and measures
through the router, and a replica that dies fails its trial with the reason while the study
goes on and nothing of that trial is left running."""

from __future__ import annotations

import json
from pathlib import Path

import psutil

from tests.conftest import base_spec, call_tuner, write_yaml
from tuner.store import Store
from tuner.testing.fake_engine import fake_engine_section, fake_model


def _study(tmp_path: Path, space: dict, landscape: dict, n_trials: int):
    (tmp_path / "landscape.json").write_text(json.dumps(landscape))
    write_yaml(tmp_path / "space.yaml", {"name": "replicas", "engine": "vllm",
                                         "parameters": space})
    spec = base_spec(fake_model(tmp_path / "model"), space="space.yaml",
                     hardware={"gpu_type": "cpu", "devices": 2},
                     workload={"input_len": 8, "output_len": 8, "concurrency": [4],
                               "requests_per_level": 16, "warmup_requests": 2},
                     sla={"ttft_p90_ms": 2000}, sampler={"name": "grid"},
                     budget={"n_trials": n_trials, "trial_timeout_s": 60, "confirm_top_k": 0})
    spec["engine"] = fake_engine_section(tmp_path, ready_timeout_s=20)
    write_yaml(tmp_path / "study.yaml", spec)
    run = call_tuner("run", "study.yaml", cwd=tmp_path)
    assert run.code == 0, run.stdout[-3000:] + run.stderr
    store = Store.open(f"sqlite:///{tmp_path / 'tuner.db'}", create=False)
    return run.stdout, store


def _running(store: Store, trial_id: int) -> list[int]:
    return [s.pid for s in store.servers(trial_id) if psutil.pid_exists(s.pid)
            and psutil.Process(s.pid).status() != psutil.STATUS_ZOMBIE]


def test_a_study_searches_replicas_and_router_policy_through_the_router(tmp_path):
    out, store = _study(tmp_path, {
        "replicas": {"values": [1, 2]},
        "router_policy": {"values": ["round_robin", "cache_aware", "kv_aware"],
                          "when": {"replicas": 2}},
    }, {"default": {"ttft_s": 0.002, "itl_s": 0.002}}, n_trials=4)
    with store:
        trials = store.trials("test-study")
        by = {(t.params.get("replicas"), t.params.get("router_policy")): t for t in trials}
        assert by[(1, None)].state == "complete"
        for policy in ("round_robin", "cache_aware"):
            t = by[(2, policy)]
            assert t.state == "complete", t.failure_reason
            assert t.gpus == 2  # a core per replica: figures are per the cores of both
            plan = t.launch_plan
            router = plan["extra"]["router"]
            assert router["argv"][router["argv"].index("--policy") + 1] == policy
            # Measured at the router's address; each replica on a core of its own.
            assert plan["port"] == router["port"]
            binds = [r["env"]["VLLM_CPU_OMP_THREADS_BIND"] for r in plan["extra"]["replicas"]]
            assert sorted(binds) == ["0", "1"]
            assert len(store.servers(t.id)) == 3 and _running(store, t.id) == []
        # kv_aware needs KV-event feeds tuner does not wire: refused before any launch.
        kv = by[(2, "kv_aware")]
        assert kv.state == "infeasible" and "KV-cache event feeds" in kv.failure_reason


def test_a_replica_that_dies_fails_its_trial_and_the_study_goes_on(tmp_path):
    # The first replica started of batch 4 crashes at its first request; batch 8 serves.
    out, store = _study(tmp_path, {
        "replicas": {"values": [2]},
        "router_policy": {"values": ["round_robin"]},
        "max_batch_size": {"values": [4, 8]},
    }, {"default": {"ttft_s": 0.002, "itl_s": 0.002},
        "rules": [{"match": {"max-num-seqs": 4}, "fail": "crash", "fail_starts": 1}]},
        n_trials=2)
    with store:
        trials = {t.params["max_batch_size"]: t for t in store.trials("test-study")}
        crashed = trials[4]
        assert crashed.state == "failed" and crashed.failure_kind == "crash"
        assert crashed.failure_reason.startswith("replica ")
        assert "of 2" in crashed.failure_reason
        # Its router and the replica that survived were stopped with it.
        assert len(store.servers(crashed.id)) == 3 and _running(store, crashed.id) == []
        assert trials[8].state == "complete"
    assert "failed (crash): replica" in out
