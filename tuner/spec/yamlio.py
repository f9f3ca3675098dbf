"""Loading YAML into pydantic models with one-line errors that name the field."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from tuner.spec.errors import BadInput

M = TypeVar("M", bound=BaseModel)


def read_yaml(path: Path, what: str) -> dict:
    if not path.is_file():
        raise BadInput(f"{what} {path} does not exist: check the path")
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise BadInput(f"{what} {path} is not readable YAML ({first}): fix the file") from e
    if not isinstance(data, dict):
        raise BadInput(f"{what} {path} must be a YAML mapping of fields, not {type(data).__name__}")
    return data


def validation_message(e: ValidationError, source: str) -> str:
    """The first validation error as `source: field.path: message`."""
    err = e.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "(top level)"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown field: remove it or check its spelling"
    elif err["type"] == "missing":
        msg = "required field is missing: add it"
    more = f" (and {len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
    return f"{source}: {where}: {msg}{more}"


def load_model(model: type[M], data: dict, source: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise BadInput(validation_message(e, source)) from e
