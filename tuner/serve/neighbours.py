"""Other work on the cores a study measures on: a second `tuner run`, a build, a `yes` someone
left running. Two studies on one 2-core machine measured 101 and 91 tok/s/GPU where one alone
measured 506, and nothing said so; a figure is worth only as much as the machine was quiet.

This module only looks, and costs no wait: a watch notes every process's CPU time when a server
starts and compares when it is ready, so the sample is the start itself. Processes of this
tuner's own tree (its servers) are left out.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

import psutil

BUSY_SHARE = 0.5  # of one core over the sample: a process that busy competes for a core


@dataclass(frozen=True)
class Neighbour:
    pid: int
    name: str
    cores: float  # cores it used over the sample (1.0: one core, all of the time)

    def text(self) -> str:
        return f"{self.name} (pid {self.pid}, {self.cores:.0%} of a core)"


def _ours() -> set[int]:
    me = psutil.Process()
    return {me.pid, *(c.pid for c in me.children(recursive=True))}


class NeighbourWatch:
    """CPU time of every process outside this tuner's tree that may run on `cores` (default:
    the cores this tuner may use), from now until `busy()`."""

    def __init__(self, cores: Sequence[int] | None = None):
        wanted = set(cores if cores is not None else os.sched_getaffinity(0))
        ours = _ours()
        self._start = time.monotonic()
        self._seen: dict[int, tuple[psutil.Process, float]] = {}
        for p in psutil.process_iter():
            try:
                if p.pid in ours or not wanted & set(p.cpu_affinity()):
                    continue
                t = p.cpu_times()
                self._seen[p.pid] = (p, t.user + t.system)
            except (psutil.Error, OSError):
                continue

    def busy(self, share: float = BUSY_SHARE) -> list[Neighbour]:
        """The processes that used more than `share` of a core since the watch began, busiest
        first."""
        elapsed = max(time.monotonic() - self._start, 1e-3)
        ours = _ours()
        found = []
        for pid, (p, before) in self._seen.items():
            try:
                t = p.cpu_times()
                used = (t.user + t.system - before) / elapsed
                if used > share and pid not in ours:
                    found.append(Neighbour(pid, p.name(), used))
            except (psutil.Error, OSError):
                continue
        return sorted(found, key=lambda n: n.cores, reverse=True)

    def line(self) -> str | None:
        """One line naming the busy neighbours, or None on a quiet machine."""
        found = self.busy()
        if not found:
            return None
        shown = ", ".join(n.text() for n in found[:3])
        more = f" and {len(found) - 3} more" if len(found) > 3 else ""
        return (f"other work on these cores while the server started: {shown}{more}: figures "
                "measured now are skewed by it (stop it; the head-to-head compares finalists "
                "side by side)")
