"""A configuration served as replicas behind a router: several engine servers, each on its own
devices, and one router in front of them that the load generator talks to.

It is entered as one server is (start, wait until ready, measure, stop), so a trial, a
confirmation and a head-to-head serve it the same way. Each replica and the router is a
`ServerProcess` of its own (its process group, its log, its teardown); the deployment is alive
while every one of them is, fails with the reason of the first that died, and stops them all
whatever happened.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tuner.serve.cpu_layout import CpuLayout
from tuner.serve.engines.base import LaunchPlan
from tuner.serve.failures import tail
from tuner.serve.launcher import LaunchFailure, ServerProcess


class MemberFailure(LaunchFailure):
    """A failure whose reason already names the member of the deployment it is about."""


@dataclass
class Deployment:
    """Replicas and their router. `plan` is what the load generator is pointed at: the
    router's address with the replicas' engine and model, and the devices of all replicas."""

    plan: LaunchPlan
    replicas: list[ServerProcess]
    router: ServerProcess
    # A CPU trial's layout over all its replicas: the ranks of each, and where the routers,
    # frontends and the load generator run (tuner.serve.cpu_layout).
    layout: CpuLayout | None = None

    def members(self) -> list[ServerProcess]:
        """Every process group of the deployment: its replicas, then its router."""
        return [*self.replicas, self.router]

    @property
    def log_path(self) -> Path:
        # The first replica's log is the engine's: its start phases and its errors.
        return self.replicas[0].log_path

    @property
    def proc(self):
        return self.replicas[0].proc

    @property
    def pid(self) -> int:
        return self.replicas[0].pid

    @property
    def create_time(self) -> float | None:
        return self.replicas[0].create_time

    def start(self) -> None:
        # The router starts beside its replicas: it waits for their health itself.
        for member in self.members():
            member.start()

    def alive(self) -> bool:
        return all(m.alive() for m in self.members())

    def log_text(self) -> str:
        return self.replicas[0].log_text()

    def _name(self, member: ServerProcess) -> str:
        if member is self.router:
            return f"router ({self.router.plan.engine})"
        return f"replica {self.replicas.index(member) + 1} of {len(self.replicas)}"

    def failure(self, fallback_kind: str | None = None, fallback_reason: str = "") -> LaunchFailure:
        """What went wrong: the first member that died, named, with its own reason and log
        tail; while every one is alive, the first replica's reading of `fallback_*`."""
        dead = next((m for m in self.members() if not m.alive()), None)
        f = (dead or self.replicas[0]).failure(None if dead else fallback_kind, fallback_reason)
        who = self._name(dead) if dead else "replicas"
        return MemberFailure(f.kind, f"{who}: {f.reason}", f.log_tail)

    def wait_ready(self, timeout_s: float, tick: Callable[[float], None] | None = None) -> float:
        """Seconds until every replica and then the router answered their health; a
        LaunchFailure naming the member that exited or did not get ready in time."""
        t0 = time.monotonic()
        for member in self.members():
            def watched(elapsed: float) -> None:
                dead = next((m for m in self.members() if not m.alive()), None)
                if dead is not None:
                    raise self.failure()
                if tick:
                    tick(elapsed)

            left = max(0.0, timeout_s - (time.monotonic() - t0))
            try:
                member.wait_ready(left, tick=watched)
            except MemberFailure:
                raise
            except LaunchFailure as f:
                raise MemberFailure(f.kind, f"{self._name(member)}: {f.reason}",
                                    f.log_tail) from None
        return time.monotonic() - t0

    def hold_frontend(self) -> list[int]:
        return [pid for r in self.replicas for pid in r.hold_frontend()]

    def engine_version(self) -> str | None:
        return self.replicas[0].engine_version()

    def stop(self, grace_s: float = 20.0) -> None:
        """Stop the router, then every replica at once (each group SIGTERMed, then SIGKILLed
        after the grace period): members never started are skipped."""
        self.router.stop(grace_s)
        with ThreadPoolExecutor(max_workers=len(self.replicas)) as pool:
            list(pool.map(lambda r: r.stop(grace_s), self.replicas))

    def router_log_tail(self) -> str:
        return tail(self.router.log_text())
