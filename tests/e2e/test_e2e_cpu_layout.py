"""A CPU trial's layout on a real vLLM (CPU build) server, read from /proc while it serves: at
TP1 its compute worker on the rank's core and its frontend (API server, engine core) on the
other; at TP2 each rank's worker on a core of its own. Servers as trials start them (vLLM's
default process layout: workers apart from the engine core). Marked `engine`."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

from tests.conftest import base_spec
from tuner.search.context import resolve_executable
from tuner.serve.cpu_layout import WORKER_PREFIX, observed_cores, plan_layout
from tuner.serve.engines import EngineSettings, get_adapter
from tuner.serve.hardware import cpu_inventory
from tuner.serve.launcher import ServerProcess, free_port, group_members

pytestmark = [
    pytest.mark.engine,
    pytest.mark.usefixtures("vllm_installed"),
]


def _serving(tiny_model: Path, world: int, run_dir: Path):
    spec = base_spec(tiny_model)
    env = {k: v for k, v in spec["engine"]["env"].items()
           if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}  # vLLM's default: workers of their own
    settings = EngineSettings(executable=resolve_executable("vllm"), model=str(tiny_model),
                              args=spec["engine"]["args"], env=env)
    inv = cpu_inventory()
    slot = list(inv.devices[:2])
    config = {"tensor_parallel_size": world}
    plan = get_adapter("vllm").launch_plan(config, settings, host="127.0.0.1",
                                           port=free_port(), inventory=inv, devices=slot)
    layout = plan_layout(slot, world, 1)
    return ServerProcess(plan, run_dir, cpus=layout.slot, layout=layout), layout


def _processes(server: ServerProcess) -> tuple[list[psutil.Process], list[psutil.Process]]:
    members = group_members(server.pid, server.create_time or 0.0)
    workers = [p for p in members if p.cmdline()[:1] and
               p.cmdline()[0].startswith(WORKER_PREFIX)]
    return workers, [p for p in members if p not in workers]


def _main_thread_cores(pid: int) -> set[int]:
    # A worker's main thread runs its rank's OpenMP work, bound by vLLM to the rank's cores.
    return set(os.sched_getaffinity(pid))


@pytest.mark.parametrize("world", [1, 2])
def test_the_ranks_and_the_frontend_run_on_the_cores_the_layout_names(tiny_model, tmp_path,
                                                                       world):
    server, layout = _serving(tiny_model, world, tmp_path)
    server.start()
    try:
        server.wait_ready(300)  # then the frontend is held to its cores
        workers, frontend = _processes(server)
        assert len(workers) == world and frontend
        ranks = sorted(_main_thread_cores(w.pid) for w in workers)
        assert ranks == sorted(set(r) for r in layout.ranks)
        if world == 1:  # TP1 on two cores: the frontend has the other core to itself
            assert layout.frontend == (layout.slot[1],) and not layout.shared
            for p in frontend:
                assert observed_cores(p.pid) == set(layout.frontend), p.cmdline()[:1]
        else:  # TP2 takes both: disjoint ranks, the frontend shares them
            assert not ranks[0] & ranks[1] and layout.shared
            for p in frontend:
                assert observed_cores(p.pid) <= set(layout.slot)
    finally:
        server.stop()
