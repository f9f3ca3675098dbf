"""A storage URL's password never leaves the process that was given it: not onto a dashboard
page (rendered by AppTest and in a browser), nor into a log, nor into any process's argv.

Both run on the throwaway PostgreSQL server `make test` starts (`.ci/with-postgres`), whose role
has a real password.
"""

from __future__ import annotations

import logging

import psutil
import pytest

pytest.importorskip("streamlit", reason="the dashboard extra is not installed (make install)")

from sqlalchemy.engine import make_url  # noqa: E402

from tests.dashboard.test_dashboard_app import PAGES, STUDY_TABS, open_page, show_tab, text  # noqa: E402
from tests.dashboard.test_dashboard_e2e import Dashboard  # noqa: E402
from tests.report.test_dashboard_data import mixed_study  # noqa: E402
from tuner.serve.launcher import group_members  # noqa: E402

QUERY = {"views/study.py": {"study": "s"}, "views/trial.py": {"study": "s", "trial": "1"}}
ROUTES = {"views/overview.py": "/", "views/study.py": "/study?study=s",
          "views/compare.py": "/compare", "views/trial.py": "/trial?study=s&trial=1"}


def password_of(url: str) -> str:
    password = make_url(url).password
    assert password and len(password) >= 8, "the test server's role must have a real password"
    return password


def argv_of_group(proc) -> str:
    """The command line of every process in `proc`'s process group (the dashboard's: tuner and
    its Streamlit server), as `ps` shows them to any user of the host. Only the group's: other
    tests running beside this one (pytest-xdist) may pass the same URL on their command line."""
    lines = []
    for member in group_members(proc.pid, psutil.Process(proc.pid).create_time()):
        try:
            lines.append(" ".join(member.cmdline()))
        except psutil.Error:  # gone meanwhile, or not ours to read
            continue
    return "\n".join(lines)


def test_no_page_shows_the_password_of_its_storage_url(monkeypatch, pg_url, caplog):
    secret = password_of(pg_url)
    mixed_study(pg_url)
    caplog.set_level(logging.DEBUG)
    for page in PAGES:
        at = open_page(monkeypatch, pg_url, page, **QUERY.get(page, {}))
        shown = [text(at)]
        if page == "views/study.py":
            for tab in STUDY_TABS:
                shown.append(text(show_tab(at, tab)))
        shown.append(repr(at._tree))  # every element, drawn or not, with its arguments
        assert secret not in "\n".join(shown), page
        if page == "views/overview.py":
            assert "tuner:***@127.0.0.1" in text(at)  # the database is named, masked
    assert secret not in caplog.text


def test_the_served_dashboard_keeps_the_password_out_of_pages_logs_and_argv(pg_url, browser,
                                                                            tmp_path):
    secret = password_of(pg_url)
    mixed_study(pg_url)
    server = Dashboard(pg_url, tmp_path, in_env=True)
    try:
        server.wait_ready()
        group = argv_of_group(server.proc)
        assert "tuner.cli dashboard" in group and "serve.py" in group
        assert secret not in group
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        for view, route in ROUTES.items():
            page.goto(server.url + route, timeout=60_000)
            heading = {"views/overview.py": "Database", "views/study.py": "Best configuration",
                       "views/compare.py": "Compare studies", "views/trial.py": "Trial 1 of s"}
            page.get_by_text(heading[view]).first.wait_for(timeout=60_000)
            page.wait_for_load_state("networkidle")
            assert secret not in page.content(), view
            body = page.inner_text("body")
            assert "Traceback" not in body, view
            if view == "views/overview.py":
                assert "tuner:***@127.0.0.1" in body
        assert secret not in argv_of_group(server.proc)
    finally:
        code = server.stop()
    log = server.log.read_text()
    assert code == 0, log[-2000:]
    assert "reading postgresql" in log and "***" in log
    assert secret not in log
