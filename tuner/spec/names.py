"""Study names: names, never paths.

A study's name becomes a folder under the runs and exports folders, so a name with `/`, `..`, a
NUL or ten thousand characters would write elsewhere or fail deep in a trial. One rule, checked
where a name enters (the spec, `--study-name`, `--study`), and every folder built from a name is
resolved and checked to stay inside its parent.
"""

from __future__ import annotations

import re
from pathlib import Path

from tuner.spec.errors import BadInput

MAX_LENGTH = 100
_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_LENGTH - 1}}}")
RULE = (f"1-{MAX_LENGTH} letters, digits, '.', '_' or '-', starting with a letter or digit "
        "(a name, not a path)")


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a study name, or None."""
    if _NAME.fullmatch(name):
        return None
    shown = name if len(name) <= 40 else name[:40] + f"... ({len(name):,} characters)"
    return f"{shown!r} is not a study name: use {RULE}"


def check_study_name(name: str, field: str) -> str:
    """`name` where it is a study name; else BadInput naming `field`."""
    problem = name_problem(name)
    if problem:
        raise BadInput(f"{field}: {problem}")
    return name


def folder_of(parent: Path, name: str, field: str = "study name") -> Path:
    """`parent / name` for a study name, checked to stay inside `parent` once resolved."""
    check_study_name(name, field)
    child = (parent / name).resolve()
    if not child.is_relative_to(parent.resolve()):
        raise BadInput(f"{field}: {name!r} leads outside {parent}: use {RULE}")
    return parent / name
