"""Turn YAML and pydantic errors into one-line user errors naming the field and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from hpcprof.errors import UserError

Model = TypeVar("Model", bound=BaseModel)


def _allowed_fields(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names allowed at `loc` (the parent of an unknown key) in `model`."""
    current: Any = model
    for part in loc:
        fields = getattr(current, "model_fields", None)
        if fields is None or part not in fields:
            return []
        annotation = fields[part].annotation
        current = next((a for a in getattr(annotation, "__args__", ()) if hasattr(a, "model_fields")),
                       annotation)
    return sorted(getattr(current, "model_fields", {}))


def describe(error: ValidationError, model: type[BaseModel], source: str) -> str:
    """One line for the first error of `error`: `source: field 'a.b': problem`."""
    first = error.errors()[0]
    loc = tuple(p for p in first["loc"] if not (isinstance(p, str) and p.startswith(("function-", "tagged-union"))))
    field = ".".join(str(p) for p in loc) or "(top level)"
    if first["type"] == "extra_forbidden":
        allowed = _allowed_fields(model, loc[:-1])
        hint = f"; allowed keys: {', '.join(allowed)}" if allowed else ""
        return f"{source}: unknown key '{field}'{hint}"
    msg = first["msg"].removeprefix("Value error, ")
    got = first.get("input")
    shown = "" if isinstance(got, (dict, list)) or got is None else f" (got {got!r})"
    return f"{source}: field '{field}': {msg}{shown}"


def validate(model: type[Model], data: Any, source: str) -> Model:
    """Validate `data` into `model`, raising a one-line UserError."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise UserError(describe(exc, model, source)) from None


def load_yaml(path: Path, what: str) -> dict[str, Any]:
    """Load a YAML mapping, with one-line errors for a missing file or bad syntax."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise UserError(f"{what} {path}: cannot read ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise UserError(f"{what} {path}:{where} not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict):
        raise UserError(f"{what} {path}: expected a YAML mapping at the top level")
    return data
