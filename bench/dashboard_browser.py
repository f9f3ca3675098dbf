"""How long the dashboard's Choose page takes in a real browser: `tuner dashboard` serving the
5,000-trial database of bench/dashboard_load.py (SYNTHETIC BENCHMARK DATA, an H200-like and a
B200-like study), loaded in headless Chromium (Debian's, driven by Playwright, as the browser
tests do). Run by hand, prints a table:

    .venv/bin/python -m bench.dashboard_browser [--trials 5000] [--runs 3]

Each run opens a fresh page and times, from the navigation, until the winner card's value and
the chart's drawing surface are both on the page. The first run is the first viewer after the
server reported ready (`tuner dashboard` imports the pages' modules and reads the database
before it serves); the next runs are later viewers; the last comes after the database changed
(its modification time moved, as a study's write moves it), so every study is read again, as
when a study is writing. The target is under 3 s on a 2-core machine.

`--smoke`: 40 synthetic trials in a temporary folder, the first viewer and the one after a write
only (seconds); far from the target's size.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.dashboard_load import CHOOSE_STUDIES, _database

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"tuner dashboard exited {proc.returncode}: {log.read_text()[-1000:]}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.read().strip() == b"ok":
                    return
        except OSError:
            time.sleep(0.5)
    sys.exit(f"tuner dashboard not ready in {timeout} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=5000)
    p.add_argument("--db", type=Path, default=Path("/tmp/tuner-dashboard-bench-choose.db"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--smoke", action="store_true", help="seconds: 40 trials in a temporary "
                   "folder, the first viewer and the one after a write")
    a = p.parse_args()
    if a.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            a.trials, a.runs, a.db = 40, 1, Path(tmp) / "dashboard-bench-choose.db"
            print(f"smoke: {a.trials} synthetic trials, far from the target's size", flush=True)
            run(a)
        return
    run(a)


def run(a: argparse.Namespace) -> None:
    from playwright.sync_api import sync_playwright

    storage = _database(a.db, a.trials, False, CHOOSE_STUDIES)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = a.db.with_name(a.db.name + ".dashboard.log")
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tuner.cli", "dashboard", "--port",
                                 str(port)], env={**os.environ, "TUNER_STORAGE": storage},
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    times = []
    try:
        wait_ready(url, proc, log)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            runs = ["first viewer", *["later viewer"] * (a.runs - 1), "after a write"]
            for run, kind in enumerate(runs):
                if kind == "after a write":
                    os.utime(a.db)  # what a study's commit does to the version the pages key on
                page = browser.new_page(viewport={"width": 1500, "height": 2400})
                t0 = time.perf_counter()
                page.goto(f"{url}/choose", timeout=120_000)
                page.get_by_test_id("stMetricValue").first.wait_for(timeout=120_000)
                page.locator("[data-testid='stVegaLiteChart'] canvas, "
                             "[data-testid='stVegaLiteChart'] svg").first.wait_for(
                                 timeout=120_000)
                times.append(time.perf_counter() - t0)
                print(f"run {run + 1} ({kind}): {times[-1]:.2f} s to the winner card and the "
                      "chart", flush=True)
                page.close()
            browser.close()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
    print(f"\n{os.cpu_count()} CPUs; Choose page, {a.trials:,} synthetic trials in 2 studies, "
          f"headless Chromium")
    print(f"{'run':>4}  {'viewer':<14}  {'seconds':>8}")
    for i, (kind, t) in enumerate(zip(runs, times, strict=True), 1):
        print(f"{i:>4}  {kind:<14}  {t:>8.2f}")
    worst = max(times)
    print(f"slowest {worst:.2f} s, {'under' if worst < 3 else 'OVER'} the 3 s target")


if __name__ == "__main__":
    main()
