"""The browser the dashboard's browser tests drive."""

from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture
def browser():
    # Both are part of the test setup (`make install`, `.ci/run`): missing, the test fails, so a
    # broken dashboard page cannot pass unseen.
    try:
        from playwright import sync_api
    except ImportError:
        pytest.fail("playwright is not installed: run the tests through `make test`")
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is absent: apt-get install chromium (.ci/run does)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()
