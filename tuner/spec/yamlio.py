"""Loading YAML into pydantic models with one-line errors that name the field."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from tuner.spec.errors import BadInput

M = TypeVar("M", bound=BaseModel)

# More values than any spec or space holds. YAML aliases can make a few lines expand to billions
# of values (or a cycle) once the document is walked, validated or stored; this caps the walk.
MAX_VALUES = 10_000


class _Loader(yaml.SafeLoader):
    """YAML's safe loader that reads `1e9` and `5E-3` as the numbers they are (YAML 1.2, as
    JSON), where PyYAML's YAML 1.1 rules read them as text: a limit on a field then applies to
    them, instead of "not a value this field takes"."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def read_yaml(path: Path, what: str) -> dict:
    if not path.is_file():
        raise BadInput(f"{what} {path} does not exist: check the path")
    try:
        data = yaml.load(path.read_bytes().decode("utf-8"), Loader=_Loader)
    except UnicodeDecodeError as e:
        raise BadInput(f"{what} {path} is not UTF-8 text (byte {e.start}): save it as UTF-8") from e
    except (OSError, yaml.YAMLError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise BadInput(f"{what} {path} is not readable YAML ({first}): fix the file") from e
    except RecursionError as e:
        raise BadInput(f"{what} {path} nests too deeply to read: flatten it") from e
    if not isinstance(data, dict):
        raise BadInput(f"{what} {path} must be a YAML mapping of fields, not {type(data).__name__}")
    if _too_many_values(data):
        raise BadInput(f"{what} {path} expands to more than {MAX_VALUES:,} values (YAML aliases "
                       "*name repeat what they point to): write the values out without aliases")
    return data


def _too_many_values(data: Any) -> bool:
    """Whether walking `data` (aliases expanded, as serialising it would) meets more than
    MAX_VALUES values; stops counting there, so a cycle or an exponential alias costs little."""
    seen, stack = 0, [data]
    while stack:
        seen += 1
        if seen > MAX_VALUES:
            return True
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set):
            stack.extend(item)
    return False


def validation_message(e: ValidationError, source: str) -> str:
    """The first validation error as `source: field.path: message`. Pydantic's names for the
    branches of a union (`list[...]`, `int`) are left out of the path: a value that fits none of
    the types a field takes is said so once, with the value."""
    errors = e.errors()
    err = errors[0]
    loc = [str(p) for p in err["loc"] if not _union_branch(p)]
    where = ".".join(loc) or "(top level)"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown field: remove it or check its spelling"
    elif err["type"] == "missing":
        msg = "required field is missing: add it"
    elif len(loc) < len(err["loc"]):
        msg = f"{_short(err.get('input'))} is not a value this field takes"
    places = {tuple(str(p) for p in x["loc"] if not _union_branch(p)) for x in errors}
    more = f" (and {len(places) - 1} more)" if len(places) > 1 else ""
    return " ".join(f"{source}: {where}: {msg}{more}".split())


def _union_branch(part: object) -> bool:
    return isinstance(part, str) and ("[" in part or part in {"bool", "int", "float", "str",
                                                              "list", "dict", "none"})


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def load_model(model: type[M], data: dict, source: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise BadInput(validation_message(e, source)) from e
