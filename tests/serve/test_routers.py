"""The router in front of a configuration's replicas: its command as the installed router's own
--help defines it, and the real router (vllm-router, the `router` extra) routing between
replicas, failing with the replica that died, and leaving nothing running when stopped."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from tuner.serve.engines import EngineSettings, get_adapter
from tuner.serve.hardware import Inventory
from tuner.serve.launcher import LaunchFailure
from tuner.serve.routers import find_executable, get_router, world_size
from tuner.serve.routers.replicas import deployment
from tuner.testing.fake_engine import LANDSCAPE_ENV, fake_vllm

ROUTER = get_router("vllm")


@pytest.fixture(scope="module")
def router_help() -> str:
    exe = find_executable(ROUTER.default_executable)
    assert exe is not None, "vllm-router is not installed: `make install` installs the extra"
    return subprocess.run([exe, "--help"], capture_output=True, text=True, check=True).stdout


def test_the_policies_are_the_installed_routers_own(router_help):
    choices = re.search(r"--policy \{([a-z_,]+)\}", router_help).group(1).split(",")
    assert tuple(choices) == ROUTER.policies


def test_every_flag_of_a_router_command_is_one_its_help_lists(router_help):
    plan = ROUTER.launch_plan(["http://127.0.0.1:1", "http://127.0.0.1:2"], "round_robin",
                              executable="vllm-router", host="127.0.0.1", port=3, metrics_port=4,
                              model="m", ready_timeout_s=60)
    flags = [a for a in plan.argv if a.startswith("--")]
    assert {"--policy", "--port", "--prometheus-port", "--disable-retries"} <= set(flags)
    for flag in flags:
        assert re.search(rf"\[{flag}[ \]]", router_help), flag
    # Its own metrics port: the default (29000) would collide between two routers.
    assert plan.argv[plan.argv.index("--prometheus-port") + 1] == "4"
    # And the router an export deploys.
    deployed = ROUTER.deploy_command(["http://a:8000", "http://b:8000"], "cache_aware",
                                     executable="vllm-router", host="0.0.0.0", port=8000)
    for flag in (a for a in deployed if a.startswith("--")):
        assert re.search(rf"\[{flag}[ \]]", router_help), flag


def test_a_policy_the_replicas_cannot_feed_or_the_router_lacks_is_infeasible():
    assert "KV-cache event feeds" in ROUTER.infeasibility("kv_aware")
    assert "not a policy of vllm-router" in ROUTER.infeasibility("least_loaded")
    assert ROUTER.infeasibility("cache_aware") is None


def test_replicas_multiply_the_devices_a_configuration_takes():
    vllm = get_adapter("vllm")
    assert world_size(vllm, {"tensor_parallel_size": 2, "replicas": 3}) == 6
    assert world_size(vllm, {"tensor_parallel_size": 2}) == 2


def _fakes(tmp_path: Path, landscape: dict, policy: str):
    (tmp_path / "landscape.json").write_text(json.dumps(landscape))
    settings = EngineSettings(executable=str(fake_vllm(tmp_path / "bin")), model="m", args={},
                              env={LANDSCAPE_ENV: str(tmp_path / "landscape.json")})
    inventory = Inventory(kind="cpu", type="cpu", devices=(0, 1), description="2 cores",
                          host="test")
    return deployment(get_adapter("vllm"), ROUTER, {"replicas": 2, "router_policy": policy},
                      settings, host="127.0.0.1", inventory=inventory, devices=[0, 1],
                      workdir=tmp_path / "run", ready_timeout_s=30)


def _complete(url: str) -> int:
    body = json.dumps({"model": "m", "prompt": [1, 2, 3], "max_tokens": 2}).encode()
    req = urllib.request.Request(url + "/v1/completions", body,
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 (loopback)
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def _routed(metrics_port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:  # noqa: S310
        text = r.read().decode()
    return {m[0]: float(m[1]) for m in re.findall(
        r'vllm_router_processed_requests_total\{worker="([^"]+)"\} (\S+)', text)}


def _gone(pids: list[int]) -> bool:
    return not [p for p in pids if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_round_robin_sends_each_replica_half_the_requests_through_one_address(tmp_path):
    served = _fakes(tmp_path, {"default": {"ttft_s": 0.001, "itl_s": 0.001}}, "round_robin")
    try:
        served.start()
        assert served.wait_ready(30) < 30
        # The load generator is pointed at the router, not at a replica.
        assert served.plan.port == served.router.plan.port
        assert served.plan.gpus == 2 and len(served.plan.extra["replicas"]) == 2
        assert [_complete(served.plan.base_url) for _ in range(8)] == [200] * 8
        share = _routed(served.router.plan.extra["metrics_port"])
        assert sorted(share) == sorted(r.plan.base_url for r in served.replicas)
        assert list(share.values()) == [4.0, 4.0]
    finally:
        pids = [m.pid for m in served.members() if m.proc is not None]
        served.stop(grace_s=5)
    assert len(pids) == 3 and _gone(pids)


def test_a_replica_that_dies_is_named_as_the_deployments_failure(tmp_path):
    # The first replica to start crashes at its first request, the second serves.
    served = _fakes(tmp_path, {"default": {"ttft_s": 0.001, "itl_s": 0.001, "fail": "crash",
                                           "fail_starts": 1}}, "round_robin")
    try:
        served.start()
        served.wait_ready(30)
        codes = [_complete(served.plan.base_url) for _ in range(4)]
        # Retries are off: the request the dead replica took fails instead of being resent.
        assert codes.count(200) in (2, 3) and len(codes) == 4
        for _ in range(40):
            if not served.alive():
                break
            time.sleep(0.1)
        assert not served.alive()
        failure = served.failure()
        assert isinstance(failure, LaunchFailure)
        assert failure.kind == "crash" and failure.reason.startswith("replica ")
        assert "of 2" in failure.reason and "Segfault" in failure.log_tail
    finally:
        pids = [m.pid for m in served.members() if m.proc is not None]
        served.stop(grace_s=5)
    assert _gone(pids)
