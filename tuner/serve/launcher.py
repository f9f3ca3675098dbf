"""Starting, watching and stopping one engine server.

The server runs in its own process group (so every process it spawns can be stopped together), with
its output in a log file. The group stays inside tuner's session: with the kernel's scheduler
autogroups on (`/proc/sys/kernel/sched_autogroup_enabled`, the default of most distributions) a new
session is a CPU-scheduling group of its own, apart from the load generator's, and on a busy node
whole rounds then stall for about a second (`bench/launch_stalls.py` measures both ways). It is
stopped in every path: normal end, failure, Ctrl-C, SIGTERM, and, since a SIGKILLed tuner runs no
cleanup, through two more guards: the server's leader gets SIGTERM when the tuner dies (Linux
parent-death signal), and each server's process group is recorded in the store so the next run on
this host reaps whatever survived.

On a CPU node a server is held to the cores of its slot (its processes' CPU affinity, set before
the engine starts): vLLM binds only its workers' OpenMP threads (VLLM_CPU_OMP_THREADS_BIND), so
without it the API server and engine core float over every core, onto a neighbour's, and a
per-core figure depends on what else runs on the node. Once it is ready, its frontend is held to
the slot's frontend cores (tuner.serve.cpu_layout), apart from its ranks'.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from tuner.serve.cpu_layout import CpuLayout, pin_frontend
from tuner.serve.engines.base import LaunchPlan
from tuner.serve.failures import classify, tail

_PR_SET_PDEATHSIG = 1


class LaunchFailure(Exception):
    def __init__(self, kind: str, reason: str, log_tail: str):
        super().__init__(f"{kind}: {reason}")
        self.kind, self.reason, self.log_tail = kind, reason, log_tail


# tuner's own settings that hold a database password: a server has no use for them, and its
# environment is readable by anyone who may read /proc/PID/environ or a crash dump.
PRIVATE_ENV = ("TUNER_STORAGE", "TUNER_DASHBOARD_STORAGE", "TUNER_TEST_POSTGRES_URL")


def server_environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in PRIVATE_ENV}


def _child_setup(new_session: bool, cpus: tuple[int, ...] | None) -> Callable[[], None]:
    """What the server's leader does between fork and exec: a group of its own in tuner's session
    (see the module's docstring; a session of its own only to compare, bench/launch_stalls.py),
    SIGTERM when tuner dies, and on a CPU node its cores."""

    def setup() -> None:
        if new_session:
            os.setsid()
        else:
            os.setpgid(0, 0)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if cpus:
            os.sched_setaffinity(0, cpus)  # inherited by every process and thread it starts

    return setup


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes] | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 (loopback only)
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""
    except (OSError, ValueError):
        return None


@dataclass
class ServerProcess:
    plan: LaunchPlan
    workdir: Path
    proc: subprocess.Popen | None = None
    create_time: float | None = None
    # True starts the server in a session of its own, as tuner did before; only for comparing
    # the two (bench/launch_stalls.py).
    new_session: bool = False
    # The cores the server is held to on a CPU node (None: any, as on a GPU node).
    cpus: tuple[int, ...] | None = None
    # A CPU trial's layout: once ready, the frontend's processes are held to its cores.
    layout: CpuLayout | None = None

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for name, content in self.plan.files.items():
            (self.workdir / name).write_text(content)
        log = open(self.log_path, "ab")  # noqa: SIM115 (the child owns it; closed below)
        try:
            self.proc = subprocess.Popen(
                self.plan.argv,
                cwd=self.workdir,
                env={**server_environ(), **self.plan.env},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_child_setup(self.new_session, self.cpus),
            )
        finally:
            log.close()
        try:
            self.create_time = psutil.Process(self.proc.pid).create_time()
        except psutil.Error:
            self.create_time = time.time()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def failure(self, fallback_kind: str | None = None, fallback_reason: str = "") -> LaunchFailure:
        """What went wrong, read from the exit status and the log."""
        text = self.log_text()
        rc = self.proc.poll() if self.proc else None
        kind, reason = classify(text, rc)
        if fallback_kind and rc is None and reason == "server stopped answering":
            # Alive and no telling log line: the caller knows better what went wrong.
            kind, reason = fallback_kind, fallback_reason
        return LaunchFailure(kind, reason, tail(text))

    def wait_ready(self, timeout_s: float, tick: Callable[[float], None] | None = None) -> float:
        """Seconds until the health endpoint answered 200; LaunchFailure on exit or timeout."""
        t0 = time.monotonic()
        url = self.plan.base_url + self.plan.health_path
        while True:
            elapsed = time.monotonic() - t0
            if not self.alive():
                raise self.failure()
            got = http_get(url)
            if got is not None and got[0] == 200:
                self.hold_frontend()
                return elapsed
            if elapsed > timeout_s:
                raise LaunchFailure(
                    "not_ready", f"not ready after {timeout_s:.0f} s", tail(self.log_text())
                )
            if tick:
                tick(elapsed)
            time.sleep(0.5)

    def hold_frontend(self) -> list[int]:
        """On a CPU node with a layout whose frontend has cores of its own: hold the server's
        frontend processes there (its workers stay on their ranks' cores); the pids held."""
        if self.layout is None or self.proc is None:
            return []
        return pin_frontend(group_members(self.proc.pid, self.create_time or 0.0), self.layout)

    def engine_version(self) -> str | None:
        if not self.plan.version_path:
            return None
        got = http_get(self.plan.base_url + self.plan.version_path)
        if got and got[0] == 200:
            import json

            try:
                return str(json.loads(got[1]).get("version"))
            except ValueError:
                return None
        return None

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM the whole group, then SIGKILL what is left after the grace period."""
        if self.proc is None:
            return
        stop_group(self.proc.pid, self.create_time or 0.0, grace_s)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def group_members(pgid: int, not_before: float) -> list[psutil.Process]:
    """Live processes of a process group started no earlier than the leader (pid reuse guard)."""
    found = []
    for p in psutil.process_iter(["pid", "create_time", "status"]):
        try:
            if os.getpgid(p.pid) != pgid or p.info["create_time"] < not_before - 1.0:
                continue
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            found.append(p)
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return found


def stop_group(pgid: int, create_time: float, grace_s: float = 20.0) -> int:
    """Stop every process of a server's group; returns how many were alive at the start.

    SIGTERM first so the engine shuts its workers down cleanly, then SIGKILL whatever of the group
    is left (re-scanned, so a process spawned meanwhile is not missed)."""
    members = group_members(pgid, create_time)
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        targets = members if sig == signal.SIGTERM else group_members(pgid, create_time)
        for p in targets:
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass
        psutil.wait_procs(targets, timeout=wait)
    return len(members)
