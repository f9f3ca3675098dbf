"""The interface tuner needs from a router: its policies, why a policy cannot run, and the
launch plan of one router in front of given replicas."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Protocol

from tuner.serve.engines.base import LaunchPlan


class Router(Protocol):
    name: str  # the router's package and command, as a user installs it
    default_executable: str
    # The policy names its command line takes, as its own --help lists them at the pinned
    # version (tests/serve/test_routers.py reads them from the installed router).
    policies: tuple[str, ...]
    # The policy of a configuration that has replicas but no router_policy (always passed).
    default_policy: str

    def infeasibility(self, policy: str) -> str | None:
        """Why `policy` cannot run in front of replicas that tuner starts, or None. Checked
        with the rest of a configuration's feasibility, before any launch."""
        ...

    def deploy_command(self, workers: list[str], policy: str, *, executable: str, host: str,
                       port: int) -> list[str]:
        """The router's command in an exported deployment in front of `workers`."""
        ...

    def launch_plan(self, workers: list[str], policy: str, *, executable: str, host: str,
                    port: int, metrics_port: int, model: str,
                    ready_timeout_s: float) -> LaunchPlan:
        """The router in front of `workers` (their base URLs) with `policy`, serving on
        host:port and its own metrics on metrics_port. It is ready once its health endpoint
        answers, which it does only when every worker is healthy."""
        ...


def find_executable(name: str) -> str | None:
    """The router's command beside this Python (its extra installs it into tuner's
    environment), else on PATH; None where it is not installed."""
    beside = Path(sys.executable).parent / name
    if os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)
