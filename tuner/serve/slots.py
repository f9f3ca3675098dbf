"""Disjoint device sets for trials that run at the same time on one node.

A trial of world size n gets n devices of its own (CUDA_VISIBLE_DEVICES on a GPU node, the cores
its OpenMP threads are bound to on a CPU node). Blocks aligned to their size are preferred
([0-3] or [4-7] for a TP4 trial on 8 GPUs), which keeps a block on one NVLink/NUMA half where
the node has halves.
"""

from __future__ import annotations

import threading


class DevicePool:
    def __init__(self, devices: list[int] | tuple[int, ...]):
        self.all = sorted(devices)
        self._free = set(self.all)
        self._cv = threading.Condition()

    def _pick(self, n: int) -> list[int] | None:
        ids = self.all
        for start in range(0, len(ids) - n + 1, n):  # aligned blocks first
            block = ids[start:start + n]
            if self._free.issuperset(block):
                return block
        free = sorted(self._free)
        return free[:n] if len(free) >= n else None

    def acquire(self, n: int, stop: threading.Event | None = None) -> list[int] | None:
        """Wait until n devices are free and take them; None if `stop` is set meanwhile."""
        if n > len(self.all):
            raise ValueError(f"{n} devices asked of a pool of {len(self.all)}")
        with self._cv:
            while True:
                if stop is not None and stop.is_set():
                    return None
                block = self._pick(n)
                if block is not None:
                    self._free.difference_update(block)
                    return block
                self._cv.wait(0.5)

    def release(self, block: list[int]) -> None:
        with self._cv:
            self._free.update(block)
            self._cv.notify_all()

    @property
    def free(self) -> list[int]:
        with self._cv:
            return sorted(self._free)
