"""A CPU node's cores per engine rank: fixed for the whole study, so a configuration is measured
on the same cores whether it has the node alone or shares it, and its figures are per core used."""

from __future__ import annotations

import pytest

from tuner.serve.hardware import Inventory, bind_ranks, owned_devices, parse_cpu_flags
from tuner.spec.errors import BadInput

CPU4 = Inventory(kind="cpu", type="cpu", devices=(0, 1, 2, 3), description="4 cores", host="h")
GPU8 = Inventory(kind="gpu", type="H200", devices=tuple(range(8)), description="8", host="h")


def test_by_default_a_rank_gets_the_cores_left_by_a_frontend_core_divided_by_the_largest_world():
    # vLLM's own default on x86 reserves cores for its frontend (ompmultiprocessing.py): so does
    # a trial's slot where the node has room, and its ranks divide the rest.
    four = bind_ranks(CPU4, None, [1, 2])
    assert (four.per_rank, four.frontend_cores) == (1, 1)
    assert (bind_ranks(CPU4, None, [1]).per_rank, bind_ranks(CPU4, None, [1]).frontend_cores) \
        == (3, 1)
    # A world larger than the node is infeasible anyway: it does not shrink the others' share.
    assert bind_ranks(CPU4, None, [1, 2, 8]).per_rank == 1
    # Where the largest world takes every core, its frontend shares them.
    two = bind_ranks(Inventory(kind="cpu", type="cpu", devices=(0, 1), description="2",
                               host="h"), None, [1, 2])
    assert (two.per_rank, two.frontend_cores) == (1, 0)


def test_trials_run_at_once_share_the_node_so_the_largest_fit_side_by_side():
    side = bind_ranks(CPU4, None, [1], parallel=2)
    assert (side.per_rank, side.frontend_cores) == (1, 1)
    full = bind_ranks(CPU4, None, [1, 2], parallel=2)
    assert (full.per_rank, full.frontend_cores) == (1, 0)
    fixed = bind_ranks(CPU4, 4, [1], parallel=2)
    assert (fixed.per_rank, fixed.frontend_cores) == (4, 0)  # the spec's value stands


def test_a_trial_takes_its_ranks_times_the_cores_per_rank_and_its_frontend_core():
    inv = bind_ranks(CPU4, None, [1, 2])
    assert inv.devices_for(1) == 1 and inv.devices_for(2) == 2  # what figures are per
    assert inv.slot_for(1) == 2 and inv.slot_for(2) == 3


def test_the_spec_can_fix_the_cores_per_rank_within_the_node():
    assert bind_ranks(CPU4, 1, [1, 2]).per_rank == 1
    with pytest.raises(BadInput, match="hardware.cores_per_rank 5: a trial may use only 4"):
        bind_ranks(CPU4, 5, [1])


def test_a_worker_keeps_its_share_of_cores_per_rank_on_its_own_cores():
    mine = bind_ranks(owned_devices(CPU4, [2, 3]), None, [1, 2])
    assert mine.per_rank == 1 and mine.devices == (2, 3) and mine.node_devices == 4


def test_on_a_gpu_node_a_rank_is_one_gpu_and_cores_per_rank_is_refused():
    assert bind_ranks(GPU8, None, [1, 8]).per_rank == 1
    with pytest.raises(BadInput, match="hardware.cores_per_rank is for gpu_type cpu"):
        bind_ranks(GPU8, 2, [1])


# ----------------------------------------------------------------- CPU feature flags

X86_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
flags\t\t: fpu sse2 avx2 avx512f avx512dq avx512bw avx512vl
processor\t: 1
flags\t\t: fpu sse2 avx2 avx512f avx512dq avx512bw avx512vl
"""
ARM_CPUINFO = "processor\t: 0\nFeatures\t: fp asimd sve\nCPU implementer\t: 0x41\n"


def test_the_cpu_flags_are_the_first_processors_flags_line():
    assert parse_cpu_flags(X86_CPUINFO) == {"fpu", "sse2", "avx2", "avx512f", "avx512dq",
                                            "avx512bw", "avx512vl"}


def test_a_cpu_without_an_x86_flags_line_has_no_flags():
    assert parse_cpu_flags(ARM_CPUINFO) == frozenset()


def test_a_cpu_is_named_by_its_model_and_widest_instruction_set():
    from tuner.serve.hardware import cpu_description

    amd = "processor\t: 0\nmodel name\t: AMD EPYC 7R13 Processor\nflags\t\t: fpu avx2 fma\n"
    intel = ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8488C\nflags\t\t: avx2 "
             "avx512f avx512vl avx512bw avx512dq\n")
    assert cpu_description(2, amd) == "2 CPU cores (AMD EPYC 7R13 Processor, AVX2)"
    assert cpu_description(2, intel) == "2 CPU cores (Intel(R) Xeon(R) Platinum 8488C, AVX-512)"
    assert cpu_description(4, "").startswith("4 CPU cores (")
