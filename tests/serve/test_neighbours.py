"""Other work on a study's cores is seen and named; this tuner's own processes never are."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tuner.serve.neighbours import NeighbourWatch


def test_a_busy_process_outside_the_tuner_is_named_and_its_own_children_are_not():
    # Started through a shell that exits at once: the busy loop is no child of this process.
    out = subprocess.run(["sh", "-c", f"'{sys.executable}' -c 'while True: pass' >/dev/null "
                          "2>&1 & echo $!"], capture_output=True, text=True, check=True)
    stranger = int(out.stdout.strip())
    own = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        watch = NeighbourWatch()
        time.sleep(1.0)
        # Any share at all: however busy the machine, a busy loop gets some CPU in a second.
        busy = {n.pid: n for n in watch.busy(share=0.0)}
        assert stranger in busy and busy[stranger].name.startswith("python")
        assert own.pid not in busy
        assert f"(pid {stranger}, " in busy[stranger].text()  # as the study's line names it
    finally:
        own.kill()
        os.kill(stranger, signal.SIGKILL)


def test_a_watch_over_cores_nothing_else_may_use_finds_nothing():
    # No process's affinity meets a core this machine does not have.
    watch = NeighbourWatch(cores=[10_000])
    assert watch.busy(share=0.0) == [] and watch.line() is None
