"""A study name is a name, never a path: hostile names given in a spec, with `--study-name` or
with `--study` end in one line and exit 2, and nothing is written outside the project's folder
(hypothesis over names, plus the names a careless or hostile user types)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cli.test_bad_input_properties import SPACE, good_spec
from tests.conftest import call_tuner, write_yaml
from tuner.spec.errors import EXIT_BAD_INPUT
from tuner.spec.names import folder_of, name_problem

HOSTILE = ["..", ".", "../../../tmp/escape", "a/b", "/etc/passwd", "a\x00b", "x" * 10_000,
           "-rf", " lead", "trail ", "ünïcode", "a\nb", "", "~user", "$HOME", "a b"]


def test_a_study_name_is_letters_digits_dots_underscores_and_dashes():
    for good in ("tiny-moe-cpu-demo", "gpt_oss.120b-H200", "7", "a" * 100):
        assert name_problem(good) is None
    for bad in HOSTILE + ["a" * 101]:
        assert name_problem(bad) is not None, bad
    assert "(10,000 characters)" in name_problem("x" * 10_000)


def test_a_folder_built_from_a_name_stays_inside_its_parent(tmp_path: Path):
    assert folder_of(tmp_path, "study-1") == tmp_path / "study-1"
    for bad in ("..", "../x", "a/../../b"):
        with pytest.raises(Exception, match="study name"):
            folder_of(tmp_path, bad)


def written_outside(root: Path, before: set[Path]) -> set[Path]:
    return {p for p in root.parent.rglob("*") if not p.is_relative_to(root)} - before


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    write_yaml(root / "space.yaml", SPACE)
    write_yaml(root / "study.yaml", good_spec(root))
    return root


def check_refused(outcome, where: str) -> None:
    assert outcome.code == EXIT_BAD_INPUT, outcome.stdout + outcome.stderr
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1 and where in lines[0] and len(lines[0]) < 400, outcome.stderr
    assert "Traceback" not in outcome.stderr + outcome.stdout


@pytest.mark.parametrize("name", HOSTILE)
def test_every_command_refuses_a_hostile_name_in_one_line_and_writes_nothing(project: Path,
                                                                            name: str):
    before = set(project.parent.rglob("*")) - set(project.rglob("*"))
    spec = yaml.safe_load((project / "study.yaml").read_text())
    spec["name"] = name
    write_yaml(project / "hostile.yaml", spec)
    check_refused(call_tuner("run", "hostile.yaml", "--create-only", "--storage",
                             "sqlite:///tuner.db", cwd=project), "name")
    if "\x00" not in name:  # a NUL cannot be passed on a command line at all
        check_refused(call_tuner("run", "study.yaml", "--create-only", "--storage",
                                 "sqlite:///tuner.db", "--study-name", name, cwd=project),
                      "--study-name")
        check_refused(call_tuner("run", "study.yaml", "--study-name", name, "--storage",
                                 "sqlite:///tuner.db", cwd=project), "--study-name")
    assert not (project / "tuner.db").exists()  # refused before any database was created
    assert written_outside(project, before) == set()


@settings(max_examples=30, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(min_size=1, max_size=300).filter(lambda s: name_problem(s) is not None
                                                and "\x00" not in s))
def test_any_name_that_is_not_a_name_is_refused_before_anything_is_written(project: Path,
                                                                          name: str):
    before = set(project.parent.rglob("*"))
    check_refused(call_tuner("run", "study.yaml", "--create-only", "--storage",
                             "sqlite:///tuner.db", "--study-name", name, cwd=project),
                  "--study-name")
    assert set(project.parent.rglob("*")) == before


HOSTILE_URLS = ["", "sqlite://", "sqlite:///", "sqlite:///../../../tmp/escape-tuner.db",
                "sqlite:////proc/self/status", "sqlite:///" + "x" * 5_000,
                "sqlite:///nonexistent-dir/tuner.db", "mysql://u:p@127.0.0.1:1/db",
                "file:///etc/passwd", "postgresql://u:s3cret@256.0.0.1:99999/db",
                "sqlite:///\x00.db", "::::", "sqlite:///tuner.db?mode=ro&uri=true"]


@pytest.mark.parametrize("url", HOSTILE_URLS)
def test_every_reading_command_refuses_a_hostile_storage_url_in_one_line_and_writes_nothing(
        project: Path, url: str):
    before = set(project.parent.rglob("*"))
    for command in (("status",), ("best",), ("export", "--out", "out")):
        if "\x00" in url:
            continue  # a NUL cannot be passed on a command line at all
        outcome = call_tuner(*command, "--storage", url, cwd=project)
        assert outcome.code == EXIT_BAD_INPUT, (command, outcome.stdout, outcome.stderr)
        lines = outcome.stderr.strip().splitlines()
        assert len(lines) == 1 and len(lines[0]) < 600, outcome.stderr
        assert "Traceback" not in outcome.stderr and "s3cret" not in outcome.stderr
    assert set(project.parent.rglob("*")) == before
    assert not Path("/tmp/escape-tuner.db").exists()
