"""`tuner run --dry-run`: reviewable launch plans for any GPU type, with nothing started."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, call_tuner
from tests.vllm_cli import parse_vllm_serve
from tuner.plan.dry_run import dry_run
from tuner.serve.engines.base import moe_backends
from tuner.spec.study_spec import load_spec

SPECS = {"vllm": REPO / "examples" / "gpt-oss-120b.yaml",
         "trtllm": REPO / "examples" / "gpt-oss-120b-trtllm.yaml"}
BLACKWELL_ONLY = {engine: {b for b, archs in moe_backends(engine).items() if archs == ["blackwell"]}
                  for engine in SPECS}


def plans(engine: str, gpu: str, n: int = 40):
    spec_path = SPECS[engine]
    _, planned = dry_run(load_spec(spec_path), spec_path, gpu=gpu, engine=None, n_trials=n)
    return [p for p in planned if p.plan is not None], planned


def backend_of(engine: str, plan) -> str | None:
    config = yaml.safe_load(next(iter(plan.files.values())))
    return config.get("moe-backend") if engine == "vllm" else config.get("moe_config", {}).get(
        "backend")


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_no_hopper_plan_names_a_blackwell_only_backend(engine):
    assert BLACKWELL_ONLY[engine]  # the table does have such backends
    for gpu in ("H100-SXM", "H200"):
        feasible, _ = plans(engine, gpu)
        assert len(feasible) == 40
        assert not {backend_of(engine, p.plan) for p in feasible} & BLACKWELL_ONLY[engine]
    feasible, _ = plans(engine, "B200")
    assert {backend_of(engine, p.plan) for p in feasible} & BLACKWELL_ONLY[engine]


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_plans_fit_the_node_and_keep_the_engines_rules(engine):
    feasible, planned = plans(engine, "B200")
    for p in feasible:
        assert p.plan.gpus <= 8
        if engine == "vllm":
            assert p.plan.env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, range(p.plan.gpus)))
        else:
            tp, ep = p.params["tensor_parallel_size"], p.params["expert_parallel_size"]
            config = yaml.safe_load(p.plan.files["extra-llm-api-config.yaml"])
            assert tp % ep == 0 and p.plan.gpus == tp
            assert (config["tensor_parallel_size"], config["moe_expert_parallel_size"]) == (tp, ep)
            assert p.plan.argv[:2] == ["docker", "run"]  # the example runs NVIDIA's container
    assert any(p.infeasible for p in planned)  # the space does contain what the engine refuses


def test_the_cli_prints_plans_and_starts_nothing(tmp_path: Path):
    proc = call_tuner("run", SPECS["vllm"], "--dry-run", "--gpu", "H200", "--n-trials", "3",
                      cwd=tmp_path)
    assert proc.code == 0, proc.stderr
    assert "8 x H200 (planned)" in proc.stdout and "nothing is started" in proc.stdout
    assert proc.stdout.count("$ CUDA_VISIBLE_DEVICES=") == 3
    assert list(tmp_path.iterdir()) == []  # no database, no run directory, no model


def test_an_unknown_gpu_type_is_bad_input(tmp_path: Path):
    proc = call_tuner("run", SPECS["vllm"], "--dry-run", "--gpu", "H300", cwd=tmp_path)
    assert proc.code == 2 and "--gpu 'H300' is not a GPU type tuner knows" in proc.stderr


@pytest.mark.usefixtures("vllm_installed")
def test_every_vllm_plan_is_accepted_by_vllms_own_parser(tmp_path: Path):
    for gpu in ("H200", "B200"):
        feasible, _ = plans("vllm", gpu, n=25)
        for p in feasible:
            args = parse_vllm_serve(p.plan, tmp_path)
            assert args.enable_prefix_caching is False  # as the example says, not vLLM's default
            assert args.tensor_parallel_size == p.params["tensor_parallel_size"]
            assert args.moe_backend == p.params["moe_backend"]


def test_a_dry_run_refuses_a_router_policy_its_replicas_cannot_feed(tmp_path: Path):
    # The study's own rule, asked by the dry run too: kv_aware needs KV-event feeds tuner does
    # not wire, and a policy without replicas has no router to set.
    from tuner.plan.dry_run import offline_study

    spec = load_spec(SPECS["vllm"])
    study = offline_study(spec, SPECS["vllm"], gpu="H200", engine=None)
    base = {"tensor_parallel_size": 1}
    assert "KV-cache event feeds" in study.infeasible({**base, "replicas": 2,
                                                        "router_policy": "kv_aware"})
    assert study.infeasible({**base, "replicas": 2, "router_policy": "round_robin"}) is None


@pytest.mark.parametrize("gpu, node", [("H100-SXM", 8), ("H200", 8), ("B200", 8), ("GB200", 4)])
def test_replicas_dry_run_plans_fit_the_node_each_replica_on_its_own_gpus(gpu, node):
    """The replicas example's space on each GPU node: a configuration of replicas is planned
    as its replicas, each on its own block of the node's GPUs, and the router in front of
    them; one that would need more GPUs than the node has says so (a GB200 tray: 4)."""
    path = REPO / "examples" / "gpt-oss-120b-replicas.yaml"
    _, planned = dry_run(load_spec(path), path, gpu=gpu, engine=None, n_trials=60)
    served = [t for t in planned if t.router]
    assert served and any(t.plan and not t.router for t in planned)  # one server, too
    for t in served:
        n, tp = t.params["replicas"], t.params["tensor_parallel_size"]
        blocks = [r.env["CUDA_VISIBLE_DEVICES"].split(",") for r in t.replicas]
        assert len(blocks) == n and all(len(b) == tp for b in blocks)
        used = [d for b in blocks for d in b]
        assert len(set(used)) == len(used) == n * tp <= node  # disjoint, within the node
        urls = [r.base_url for r in t.replicas]
        assert t.router[:2 + n] == ["vllm-router", "--worker-urls", *urls]
        assert t.router[t.router.index("--policy") + 1] == t.params["router_policy"]
    for t in planned:
        if t.plan is None and t.params.get("replicas", 1) * t.params["tensor_parallel_size"] \
                > node:
            assert f"the node has {node}" in t.infeasible
