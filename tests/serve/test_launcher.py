"""The launcher: process groups, readiness, early exit, teardown, and reaping after a crash."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from tuner.serve.engines.base import LaunchPlan
from tuner.serve.launcher import (
    LaunchFailure,
    ServerProcess,
    free_port,
    group_members,
    port_is_free,
    stop_group,
)

# A stand-in server for launcher tests only: an HTTP server that also spawns a child process,
# like an engine spawning its workers.
SERVER = textwrap.dedent("""
    import http.server, subprocess, sys
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print("worker", child.pid, flush=True)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
        def log_message(self, *a): pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
""")


def _plan(argv, port=0, files=None) -> LaunchPlan:
    return LaunchPlan(engine="test", argv=argv, env={}, files=files or {}, host="127.0.0.1",
                      port=port, model="m", gpus=1, version_path=None)


def test_a_server_becomes_ready_and_stopping_it_stops_its_whole_group(tmp_path):
    port = free_port()
    s = ServerProcess(_plan([sys.executable, "-c", SERVER, str(port)], port), tmp_path)
    s.start()
    try:
        assert s.wait_ready(30) < 30
        assert not port_is_free("127.0.0.1", port)
        members = group_members(s.pid, s.create_time)
        assert len(members) == 2  # the server and the worker it spawned
    finally:
        s.stop(grace_s=5)
    assert group_members(s.pid, s.create_time) == []
    assert not s.alive()


@contextlib.contextmanager
def ready_server(tmp_path, **options):
    """The stand-in server, started with `options` and ready; stopped on leaving."""
    port = free_port()
    s = ServerProcess(_plan([sys.executable, "-c", SERVER, str(port)], port), tmp_path,
                      **options)
    s.start()
    try:
        s.wait_ready(30)
        yield s
    finally:
        s.stop(grace_s=5)


def test_a_server_on_cpu_cores_and_every_process_it_spawns_are_held_to_them(tmp_path):
    before = os.sched_getaffinity(0)
    core = max(before)  # one core, not all of them
    with ready_server(tmp_path, cpus=(core,)) as s:
        members = group_members(s.pid, s.create_time)
        assert len(members) == 2
        assert [p.cpu_affinity() for p in members] == [[core], [core]]
    assert os.sched_getaffinity(0) == before  # tuner's own is left as it was


def test_a_server_without_cores_inherits_tuners_affinity(tmp_path):
    with ready_server(tmp_path) as s:
        assert set(psutil.Process(s.pid).cpu_affinity()) == os.sched_getaffinity(0)


def test_the_server_has_a_group_of_its_own_inside_tuners_session(tmp_path):
    # A session of its own would be a scheduling autogroup of its own too (see the launcher).
    with ready_server(tmp_path) as s:
        assert os.getpgid(s.pid) == s.pid != os.getpgid(0)
        assert os.getsid(s.pid) == os.getsid(0)


def test_a_server_that_exits_early_is_a_classified_failure(tmp_path):
    argv = [sys.executable, "-c",
            "import sys; print('serve: error: argument --max-num-seqs: invalid int value'); "
            "sys.exit(2)"]
    s = ServerProcess(_plan(argv, free_port()), tmp_path)
    s.start()
    with pytest.raises(LaunchFailure) as e:
        s.wait_ready(30)
    assert e.value.kind == "invalid_argument"
    assert "--max-num-seqs" in e.value.reason
    assert "invalid int value" in e.value.log_tail


def test_a_server_that_never_answers_fails_as_not_ready_and_is_stopped(tmp_path):
    s = ServerProcess(_plan([sys.executable, "-c", "import time; time.sleep(600)"],
                            free_port()), tmp_path)
    s.start()
    try:
        with pytest.raises(LaunchFailure) as e:
            s.wait_ready(1.5)
        assert e.value.kind == "not_ready"
    finally:
        s.stop(grace_s=2)
    assert not s.alive()


def test_the_plan_files_are_written_where_the_server_runs(tmp_path):
    argv = [sys.executable, "-c", "print(open('config.yaml').read())"]
    s = ServerProcess(_plan(argv, files={"config.yaml": "max-num-seqs: 4\n"}), tmp_path)
    s.start()
    s.proc.wait(timeout=30)
    assert "max-num-seqs: 4" in s.log_text()


def test_the_server_gets_sigterm_when_the_tuner_dies(tmp_path):
    """A SIGKILLed tuner runs no cleanup; the parent-death signal stops its server anyway."""
    port = free_port()
    tuner_like = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from tuner.serve.launcher import ServerProcess
        from tuner.serve.engines.base import LaunchPlan
        plan = LaunchPlan(engine="t", argv=[sys.executable, "-c", {SERVER!r}, "{port}"],
                          env={{}}, files={{}}, host="127.0.0.1", port={port}, model="m", gpus=1)
        s = ServerProcess(plan, Path({str(tmp_path)!r}))
        s.start(); s.wait_ready(30)
        print(s.pid, flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", tuner_like], stdout=subprocess.PIPE,
                              text=True)
    server_pid = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while psutil.pid_exists(server_pid) and time.monotonic() < deadline:
        try:
            if psutil.Process(server_pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    alive = psutil.pid_exists(server_pid) and \
        psutil.Process(server_pid).status() != psutil.STATUS_ZOMBIE
    # The worker the server spawned belongs to the group: reaping stops it too.
    stop_group(server_pid, 0.0, grace_s=2)
    assert not alive


def test_stop_group_ignores_a_reused_pid(tmp_path):
    """A recorded group whose processes started after the record is someone else's."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         start_new_session=True)
    try:
        created = psutil.Process(p.pid).create_time()
        assert stop_group(p.pid, created + 3600, grace_s=1) == 0  # "recorded" an hour later
        assert p.poll() is None
        assert stop_group(p.pid, created, grace_s=5) == 1
        p.wait(timeout=10)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
