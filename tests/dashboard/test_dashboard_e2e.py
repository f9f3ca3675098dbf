"""`tuner dashboard` as a real server, loaded in headless Chromium (Debian's, driven by
Playwright with `executable_path`; `playwright install` is never needed)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tuner.store import Store
from tuner.verdict import rules

SCREENSHOT_COPY = Path("/tmp/dashboard-screenshot.png")
TUNER = [sys.executable, "-m", "tuner.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_tuner(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*TUNER, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def downloads_and_screenshot(page, shot: Path, copy: Path) -> None:
    """The page offers the winner's three files, and its full-page screenshot (taken once the
    charts have drawn) is kept at `copy`."""
    for name in ("config.yaml", "launch.sh", "best.json"):
        # Drawn after the card's title on a busy machine: waited for, not counted at once.
        page.get_by_role("button", name=name).first.wait_for(timeout=30_000)
    time.sleep(1)  # let the charts finish drawing
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 20_000
    shutil.copyfile(shot, copy)


# ---------------------------------------------------------------- refusals (fast, no server)


def test_dashboard_refuses_a_missing_database_in_one_line(tmp_path):
    proc = run_tuner("dashboard", "--storage", f"sqlite:///{tmp_path / 'none.db'}",
                     cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: no study database at {tmp_path / 'none.db'}: run `tuner run` first or pass "
        "--storage"]
    assert not (tmp_path / "none.db").exists()


def test_dashboard_refuses_a_foreign_file_and_a_busy_port(tmp_path):
    junk = tmp_path / "notes.db"
    junk.write_text("hello")
    proc = run_tuner("dashboard", "--storage", f"sqlite:///{junk}", cwd=tmp_path)
    assert proc.returncode == 2 and "is not an SQLite database" in proc.stderr
    assert junk.read_text() == "hello"

    Store.open(f"sqlite:///{tmp_path / 'tuner.db'}").close()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run_tuner("dashboard", "--port", str(port), cwd=tmp_path)
    assert proc.returncode == 2
    assert f"--port {port} on 127.0.0.1 cannot be used" in proc.stderr


# ---------------------------------------------------------------- the real server in a browser


class Dashboard:
    """`tuner dashboard` in its own process group; stopped (and checked stopped) on exit."""

    def __init__(self, storage: str, cwd: Path, *, in_env: bool = False) -> None:
        """`in_env`: pass the URL as $TUNER_STORAGE, as a user keeps a password out of `ps`."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = cwd / "dashboard.log"
        self._log = self.log.open("w")
        where = [] if in_env else ["--storage", storage]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **({"TUNER_STORAGE": storage} if in_env
                                                         else {})}
        self.proc = subprocess.Popen([*TUNER, "dashboard", *where, "--port", str(self.port)],
                                     cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True, env=env)

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"tuner dashboard exited {self.proc.returncode}: "
                            f"{self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as r:
                    if r.read().strip() == b"ok":
                        return
            except OSError:
                time.sleep(0.5)
        pytest.fail(f"tuner dashboard not ready in {timeout} s: {self.log.read_text()[-2000:]}")

    def stop(self) -> int:
        """SIGTERM to tuner alone: it must stop its Streamlit server too."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=30)
        finally:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # whatever is left of the group
            except ProcessLookupError:
                pass
            self._log.close()
        return code


@pytest.mark.engine
def test_the_study_page_shows_the_best_configuration_in_a_browser(real_study, browser,
                                                                  tmp_path):
    db = real_study.folder / "tuner.db"
    store = Store.open(f"sqlite:///{db}", create=False)
    study = store.get_study("test-study")
    best = rules.winner(study, store.trials("test-study"))
    shown = rules.figure(best, study).value  # the figure that decided its verdict
    store.close()

    server = Dashboard(f"sqlite:///{db}", tmp_path)
    try:
        server.wait_ready()
        page = browser.new_page(viewport={"width": 1500, "height": 2400})
        page.goto(f"{server.url}/study?study=test-study", timeout=60_000)
        card = page.get_by_text(f"Best configuration · trial {best.number}")
        card.wait_for(timeout=60_000)
        page.get_by_text("Throughput per core against per-user speed").wait_for(timeout=30_000)
        page.locator("[data-testid='stVegaLiteChart'] canvas, "
                     "[data-testid='stVegaLiteChart'] svg").first.wait_for(timeout=30_000)
        values = page.get_by_test_id("stMetricValue").all_inner_texts()
        assert f"{shown:,.0f}" in values
        body = page.inner_text("body")
        assert "vllm serve" in body
        assert "Traceback" not in body
        downloads_and_screenshot(page, tmp_path / "study-page.png", SCREENSHOT_COPY)
    finally:
        code = server.stop()
    assert code == 0, server.log.read_text()[-2000:]
    with socket.socket() as s:  # the Streamlit server went with it
        assert s.connect_ex(("127.0.0.1", server.port)) != 0


def test_an_open_study_page_follows_a_study_that_writes(browser, tmp_path):
    from tests.report.test_dashboard_data import P, level, mixed_study

    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    writer = mixed_study(url)
    server = Dashboard(url, tmp_path)
    try:
        server.wait_ready()
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        page.goto(f"{server.url}/study?study=s", timeout=60_000)
        page.get_by_text("Best configuration · trial 2").wait_for(timeout=60_000)
        writer.complete(4, P(2, batch=4), [level(2, 800.0, 300.0), level(8, 2400.0, 180.0)])
        # The page re-reads by itself (the sidebar's Live switch, on by default).
        page.get_by_text("Best configuration · trial 4").wait_for(timeout=30_000)
        assert "2,400" in page.get_by_test_id("stMetricValue").all_inner_texts()
    finally:
        code = server.stop()
    assert code == 0, server.log.read_text()[-2000:]


CHOOSE_SCREENSHOT_COPY = Path("/tmp/dashboard-choose-screenshot.png")


def test_the_choose_page_puts_both_gpu_types_on_one_chart_with_the_winner_in_a_browser(
        browser, tmp_path):
    # SYNTHETIC ROWS: an H200-like and a B200-like study (tests.choose_studies).
    from tests.choose_studies import TARGET, h200_and_b200

    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    h200_and_b200(url)
    server = Dashboard(url, tmp_path)
    try:
        server.wait_ready()
        page = browser.new_page(viewport={"width": 1500, "height": 2400})
        page.goto(f"{server.url}/choose", timeout=60_000)
        page.get_by_text("Cheapest meeting the targets").wait_for(timeout=60_000)
        # The default target is the studies' SLA floor (50 tok/s per user): the B200's c=32.
        page.get_by_test_id("stMetricValue").get_by_text("B200 · vllm").wait_for(
            timeout=30_000)
        box = page.get_by_label("at least tok/s per user (p90)")
        box.fill(f"{TARGET:g}")
        box.press("Enter")
        page.get_by_test_id("stMetricValue").get_by_text("H200 · vllm").wait_for(
            timeout=30_000)
        chart = page.locator("[data-testid='stVegaLiteChart']").first
        chart.locator("canvas, svg").first.wait_for(timeout=30_000)
        body = page.inner_text("body")
        assert "Runners-up" in body and "Traceback" not in body
        downloads_and_screenshot(page, tmp_path / "choose-page.png", CHOOSE_SCREENSHOT_COPY)
    finally:
        code = server.stop()
    assert code == 0, server.log.read_text()[-2000:]


# Each page, and what it shows once drawn.
LOCAL_ROUTES = {"/": "Open a study", "/study?study=s": "Best configuration",
                "/compare": "Best of each study",
                "/choose": "Cheapest meeting the targets", "/trial?study=s&trial=2": "Server log"}
LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}


def is_local(url: str) -> bool:
    """A request that stays on this machine: to the dashboard's own server, or data the page
    holds already (data:, blob:)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.scheme in ("data", "blob", "about") or parts.hostname in LOCAL_HOSTS


def test_no_request_leaves_the_machine_while_the_pages_load(browser, tmp_path):
    from tests.report.test_dashboard_data import P, StudyWriter, level, troubled_study

    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    troubled_study(url)
    StudyWriter(url, "t").complete(0, P(2), [level(8, 5000.0, 90.0), level(64, 9000.0, 60.0)])
    server = Dashboard(url, tmp_path)
    requested: list[str] = []
    try:
        server.wait_ready()
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        page.on("request", lambda request: requested.append(request.url))
        page.on("websocket", lambda socket: requested.append(socket.url))
        for route, drawn in LOCAL_ROUTES.items():
            page.goto(server.url + route, timeout=60_000)
            page.get_by_text(drawn).first.wait_for(timeout=60_000)
            if route.startswith("/study"):
                for tab in ("Trials", "Load curves", "Failures", "Parameter importance",
                            "Predicted vs measured"):
                    page.get_by_role("tab", name=tab).click()
                    page.wait_for_load_state("networkidle")
            page.wait_for_load_state("networkidle")
            time.sleep(1)  # the charts draw after the page settles: whatever they fetch counts
    finally:
        code = server.stop()
    assert code == 0, server.log.read_text()[-2000:]
    assert any(u.startswith(server.url) for u in requested)  # the recording saw the pages
    assert [u for u in requested if not is_local(u)] == []


def test_in_a_browser_every_page_gives_the_winner_the_figure_that_decided_it(browser, tmp_path):
    # Trial 2's confirmation (1,300 tok/s/core) differs from its first run (1,500): each page's
    # metric for it says 1,300, and its Trial page names the first run as a run, with the reason.
    from tests.report.test_dashboard_data import troubled_study

    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    troubled_study(url)
    server = Dashboard(url, tmp_path)
    metrics: dict[str, list[str]] = {}
    bodies: dict[str, str] = {}
    try:
        server.wait_ready()
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        for route in ("/study?study=s", "/choose", "/trial?study=s&trial=2"):
            page.goto(server.url + route, timeout=60_000)
            page.get_by_text(LOCAL_ROUTES[route]).first.wait_for(timeout=60_000)
            page.get_by_test_id("stMetricValue").first.wait_for(timeout=30_000)
            metrics[route] = [" ".join(t.split()) for t in
                              page.get_by_test_id("stMetric").all_inner_texts()]
            bodies[route] = page.inner_text("body")
    finally:
        code = server.stop()
    assert code == 0, server.log.read_text()[-2000:]
    assert "best tok/s/core 1,300" in metrics["/study?study=s"]  # the headline
    assert "tok/s/core 1,300" in metrics["/study?study=s"]  # the winner's card
    assert "tok/s/core 1,300" in metrics["/choose"]
    assert "tok/s/core 1,300" in metrics["/trial?study=s&trial=2"]
    assert "from its confirmation; its first run 1,500: differs" in bodies["/trial?study=s&trial=2"]
    assert not any("Traceback" in body for body in bodies.values())
