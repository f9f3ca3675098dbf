"""A CPU trial's layout: its ranks take its slot's first cores, its frontend and load generator
the rest (or share the ranks' where nothing is left), and the frontend's processes are held to
their cores while the compute workers keep theirs."""

from __future__ import annotations

import os
import subprocess
import time

import psutil
import pytest

from tuner.serve.cpu_layout import (
    CpuLayout,
    observed_cores,
    pin_frontend,
    plan_layout,
    thread_held_to,
)


def test_the_ranks_take_the_slots_first_cores_and_the_frontend_the_rest():
    tp1 = plan_layout([0, 1], world=1, per_rank=1)
    assert tp1 == CpuLayout(ranks=((0,),), frontend=(1,), client=(1,))
    assert not tp1.shared and tp1.slot == (0, 1) and tp1.compute == (0,)
    assert tp1.line() == ("layout: rank 0 on core 0; frontend (API server, engine core) on "
                          "core 1; load generator on core 1")
    big = plan_layout([4, 5, 6, 7, 8, 9, 10], world=2, per_rank=3)
    assert big.ranks == ((4, 5, 6), (7, 8, 9)) and big.frontend == (10,)


def test_where_no_core_is_left_the_frontend_shares_the_ranks_cores_and_says_so():
    tp2 = plan_layout([0, 1], world=2, per_rank=1)
    assert tp2.ranks == ((0,), (1,)) and tp2.frontend == (0, 1) and tp2.shared
    assert "frontend and load generator share them" in tp2.line()
    with pytest.raises(ValueError, match="2 ranks of 2 cores do not fit on cores"):
        plan_layout([0, 1], world=2, per_rank=2)


def test_a_layout_survives_its_stored_form():
    layout = plan_layout([2, 3, 4], world=2, per_rank=1)
    assert CpuLayout.from_dict(layout.to_dict()) == layout


@pytest.fixture
def two_cores():
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.fail("this test needs two cores, as every machine of this project has")
    return cores[:2]


def _titled(title: str) -> subprocess.Popen:
    """A process titled as vLLM titles its own (setproctitle), once the title shows."""
    p = subprocess.Popen(["bash", "-c", f"exec -a '{title}' sleep 30"])
    deadline = time.monotonic() + 10
    while psutil.Process(p.pid).cmdline()[:1] != [title] and time.monotonic() < deadline:
        time.sleep(0.01)
    return p


def test_the_frontend_is_held_to_its_cores_and_the_workers_keep_theirs(two_cores):
    compute, front = two_cores
    layout = CpuLayout(ranks=((compute,),), frontend=(front,), client=(front,))
    worker, api = _titled("VLLM::Worker_TP0"), _titled("vllm serve")
    try:
        for p in (worker, api):
            os.sched_setaffinity(p.pid, two_cores)
        held = pin_frontend([psutil.Process(worker.pid), psutil.Process(api.pid)], layout)
        assert held == [api.pid]
        assert observed_cores(api.pid) == {front}
        assert observed_cores(worker.pid) == set(two_cores)  # untouched: the engine binds it
        # No worker process (an engine core that computes itself): nothing is moved.
        assert pin_frontend([psutil.Process(api.pid)], layout) == []
    finally:
        for p in (worker, api):
            p.kill()
            p.wait()


def test_the_load_generators_thread_is_held_to_the_client_cores_and_given_back(two_cores):
    before = os.sched_getaffinity(0)
    with thread_held_to((two_cores[1],)):
        assert os.sched_getaffinity(0) == {two_cores[1]}
    assert os.sched_getaffinity(0) == before
    with thread_held_to(None):
        assert os.sched_getaffinity(0) == before
