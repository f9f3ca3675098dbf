"""Where a CPU trial's processes run: its compute ranks, its frontend and its load generator.

A deployment of vLLM's CPU build gives each rank's OpenMP threads cores of their own
(`VLLM_CPU_OMP_THREADS_BIND`) and leaves the frontend (the API server: HTTP, detokenizing,
streaming; the engine core: the scheduler loop) to the cores it reserves for it
(`VLLM_CPU_NUM_OF_RESERVED_CPU`, one per rank by default on x86; vllm/utils/
ompmultiprocessing.py). On a GPU node the frontend runs on host cores and the compute on the
devices. So a CPU trial does the same: its slot's first cores are its ranks' (the cores its
figures are per), and the cores left in the slot hold the frontend and the load generator.
Where the slot has no core left (TP2 on two cores, or two trials side by side on two cores),
they share the compute cores, and the layout says so.

The rank binding is the engine's own (the adapter's placement); tuner holds the server to its
slot at start and, once it is ready, the frontend's processes to the frontend's cores (what
`pin_frontend` does); the load generator's thread holds itself to the client's cores.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

# vLLM names its worker processes `VLLM::Worker` (one rank) or `VLLM::Worker_TP<n>` (several);
# every other process of the server is its frontend.
WORKER_PREFIX = "VLLM::Worker"


@dataclass(frozen=True)
class CpuLayout:
    """A CPU trial's cores: one group per compute rank, the frontend's, and the client's."""

    ranks: tuple[tuple[int, ...], ...]
    frontend: tuple[int, ...]
    client: tuple[int, ...]

    @property
    def compute(self) -> tuple[int, ...]:
        return tuple(c for rank in self.ranks for c in rank)

    @property
    def slot(self) -> tuple[int, ...]:
        """Every core the server may use: its ranks' and its frontend's."""
        return tuple(sorted(set(self.compute) | set(self.frontend)))

    @property
    def shared(self) -> bool:
        """The frontend runs on the compute cores (no core of its own in the slot)."""
        return bool(set(self.frontend) & set(self.compute))

    def to_dict(self) -> dict:
        return {"ranks": [list(r) for r in self.ranks], "frontend": list(self.frontend),
                "client": list(self.client)}

    @classmethod
    def from_dict(cls, d: dict) -> CpuLayout:
        return cls(tuple(tuple(r) for r in d["ranks"]), tuple(d["frontend"]),
                   tuple(d["client"]))

    def line(self) -> str:
        """The layout in one line, as each trial prints it."""
        ranks = "; ".join(f"rank {i} on {_cores(r)}" for i, r in enumerate(self.ranks))
        if self.shared:
            return (f"layout: {ranks}; frontend and load generator share them (no core left "
                    "for them in this slot)")
        return (f"layout: {ranks}; frontend (API server, engine core) on {_cores(self.frontend)}"
                f"; load generator on {_cores(self.client)}")


def _cores(cores: tuple[int, ...]) -> str:
    return ("core " if len(cores) == 1 else "cores ") + ",".join(map(str, cores))


def plan_layout(slot: list[int] | tuple[int, ...], world: int, per_rank: int) -> CpuLayout:
    """The layout of a server of `world` ranks, `per_rank` cores each, on the cores of `slot`:
    the ranks take the slot's first cores, the frontend and the load generator the rest (or, where
    nothing is left, share the ranks')."""
    cores = list(slot)
    compute = cores[: world * per_rank]
    if len(compute) < world * per_rank:
        raise ValueError(f"{world} ranks of {per_rank} cores do not fit on cores {cores}")
    ranks = tuple(tuple(compute[i * per_rank:(i + 1) * per_rank]) for i in range(world))
    rest = tuple(cores[world * per_rank:]) or tuple(compute)
    return CpuLayout(ranks, rest, rest)


def threads_of(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def hold_threads(pid: int, cores: tuple[int, ...]) -> None:
    """Hold every thread of process `pid` to `cores` (a process's affinity call holds only its
    main thread; each thread has its own)."""
    for tid in threads_of(pid):
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:  # a thread that ended meanwhile
            pass


def pin_frontend(processes: list[psutil.Process], layout: CpuLayout) -> list[int]:
    """Hold the frontend's processes (every one but the compute workers) to the layout's
    frontend cores; the pids held. Nothing where the frontend shares the compute cores, or where
    no worker process exists (a server whose engine core computes itself: moving it would move
    the compute)."""
    if layout.shared:
        return []
    names = {p.pid: _name(p) for p in processes}
    if not any(n.startswith(WORKER_PREFIX) for n in names.values()):
        return []
    held = []
    for pid, name in names.items():
        if not name.startswith(WORKER_PREFIX):
            hold_threads(pid, layout.frontend)
            held.append(pid)
    return held


def _name(p: psutil.Process) -> str:
    """The process's title (vLLM sets `VLLM::Worker_TP0` and the like), else its name."""
    try:
        title = p.cmdline()[:1]
        return title[0] if title and title[0].startswith("VLLM::") else p.name()
    except psutil.Error:
        return ""


@contextmanager
def thread_held_to(cores: tuple[int, ...] | None) -> Iterator[None]:
    """Hold the calling thread (and the threads it starts meanwhile) to `cores`, then give it
    back the cores it had; nothing where `cores` is None. The load generator's thread."""
    if cores is None:
        yield
        return
    before = os.sched_getaffinity(0)  # pid 0: this thread
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def observed_cores(pid: int) -> set[int]:
    """The cores the threads of process `pid` may run on now, as /proc says (their union)."""
    out: set[int] = set()
    for tid in threads_of(pid):
        try:
            text = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("Cpus_allowed_list:"):
                out |= _parse_list(line.split(":", 1)[1].strip())
    return out


def _parse_list(text: str) -> set[int]:
    out: set[int] = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out
