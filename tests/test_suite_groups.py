"""How `make test` shares fixtures across its pytest-xdist workers (tests/conftest.py): a test
that reads a module- or session-scoped fixture of this project runs in that fixture's group, so
the fixture (a real study, a built wheel) is built once, not once per worker."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def built_once() -> object:
    return object()


def group_of(request) -> tuple | None:
    marker = request.node.get_closest_marker("xdist_group")
    return marker.args if marker else None


def test_a_test_reading_a_module_fixture_is_in_that_fixtures_group(request, built_once):
    assert group_of(request) == ("test_suite_groups.built_once",)
    if getattr(request.config.option, "loadgroup", False):  # a worker of --dist loadgroup
        # What xdist's scheduler reads the group from: a node id that lost it (pytest 9.2 with
        # pytest-xdist 3.8) sends the test to any worker.
        assert request.node.nodeid.endswith("@test_suite_groups.built_once")


def test_a_test_reading_only_pytests_own_fixtures_has_no_group(request, tmp_path_factory):
    assert group_of(request) is None  # tmp_path_factory is session-scoped, but not ours
