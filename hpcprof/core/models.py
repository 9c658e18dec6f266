"""Typed models on msgspec (the configs, the workloads' options): their base, field checks, and
validation with one-line errors.

msgspec checks types, bounds (`Meta`), allowed values (`Literal`) and unknown keys while it
converts YAML's mappings into `Struct`s; a model's own checks run in its `__post_init__` and name
their field with `FieldError`. `validate` turns the first problem into one line naming the field
(`field 'resources.nodes': expected an integer >= 1 (got 0)`), with the allowed keys or values
where msgspec's message does not list them.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import msgspec

from hpcprof.core.errors import UserError, shorten

M = TypeVar("M", bound="Model")


class Model(msgspec.Struct, forbid_unknown_fields=True, dict=True):
    """Base of every config model: unknown keys are errors. `strict` models take no text for a
    number and no number for text (YAML gives typed values); the workloads' options are not strict
    (command-line flags are text). `dict=True` lets `validate` record which keys were given."""

    strict: ClassVar[bool] = True


class FieldError(ValueError):
    """A model's own check of one field failed (raised in `__post_init__`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def run_checks(model: Model, checks: dict[str, Callable[[Any], object]]) -> None:
    """Run `check(value)` for each named field of `model` (in its `__post_init__`): a ValueError
    raised becomes a FieldError naming the field."""
    for name, check in checks.items():
        try:
            check(getattr(model, name))
        except FieldError:
            raise
        except ValueError as exc:
            raise FieldError(name, str(exc)) from None


def matching(pattern: str, what: str) -> Callable[[Any], None]:
    """A check: the value (text, a list of texts, or None) matches `pattern` in whole, else
    "'VALUE' is not WHAT"."""
    compiled = re.compile(pattern)

    def check(value: str | list[str] | None) -> None:
        for item in value if isinstance(value, list) else [] if value is None else [value]:
            if not compiled.fullmatch(item):
                raise ValueError(f"{item!r} is not {what}")

    return check


def _decode_hook(kind: type, value: Any) -> Any:
    """msgspec's hook for the types it does not convert itself: a Path from text, and a type
    with a `from_input` class method (a ValueError there names the problem)."""
    if kind is Path:
        if not isinstance(value, (str, Path)):
            raise ValueError(f"expected a path, got {kind_of(value)}")
        return Path(value)
    return kind.from_input(value)  # type: ignore[attr-defined]


def _encode_hook(value: Any) -> Any:
    """A Path, and a `str` subclass (see `_decode_hook`), as text."""
    if isinstance(value, (Path, str)):
        return str(value)
    raise NotImplementedError


def validate(model: type[M], data: Any, source: str) -> M:
    """Validate `data` into `model`, raising a one-line UserError `source: field 'a.b': problem`. No
    text of any field may hold a NUL byte (no argument, environment value or file a job is written
    from can carry one)."""
    if (where := nul_at(data)) is not None:
        raise UserError(f"{source}: field '{where or '$'}': contains a NUL byte, which no program's argument, "
                        "environment or script can carry; remove it")
    try:
        return convert(model, data)
    except msgspec.ValidationError as exc:
        field, problem = describe(exc, model, data)
        raise UserError(f"{source}: field '{field}': {problem}" if field else f"{source}: {problem}") from None


def nul_at(data: Any, path: str = "") -> str | None:
    """The dotted path of the first key or text in `data` (YAML's mappings, lists and scalars) that
    holds a NUL byte ("" for `data` itself), None when none does."""
    if isinstance(data, str):
        return path if "\x00" in data else None
    if isinstance(data, dict):
        for key, value in data.items():
            at = f"{path}.{key}" if path else str(key)
            if "\x00" in str(key):
                return at
            if (found := nul_at(value, at)) is not None:
                return found
        return None
    if isinstance(data, (list, tuple)):
        return next((found for i, value in enumerate(data) if (found := nul_at(value, f"{path}[{i}]")) is not None),
                    None)
    return None


def convert(model: type[M], data: Any) -> M:
    """`data` as `model` (msgspec.ValidationError when it is not one), recording the keys given
    (`given_fields`)."""
    value = msgspec.convert(data, model, strict=model.strict, dec_hook=_decode_hook)
    value.__dict__["given"] = frozenset(data)
    return value


def given_fields(value: Model) -> frozenset[str]:
    """The fields the input gave (`validate`); for a model built in Python, those not at their default."""
    given = value.__dict__.get("given")
    if given is not None:
        return frozenset(given)
    return frozenset(f.name for f in msgspec.structs.fields(value) if getattr(value, f.name) != _default(f))


def _default(field: msgspec.structs.FieldInfo) -> Any:
    if field.default_factory is not msgspec.NODEFAULT:
        return field.default_factory()
    return field.default


def dump(value: Model) -> dict[str, Any]:
    """A model as JSON-able builtins (every field, defaults included; paths as text)."""
    result: dict[str, Any] = msgspec.to_builtins(value, enc_hook=_encode_hook)
    return result


def fields(model: type[Model]) -> tuple[msgspec.structs.FieldInfo, ...]:
    """A model's fields in declaration order (their types resolved)."""
    return msgspec.structs.fields(model)


def field_help(field: msgspec.structs.FieldInfo) -> str:
    """The `Meta(description=...)` of a field's Annotated type (of its member, in a union with None), or ""."""
    for kind in typing.get_args(field.type) if _is_union(field.type) else [field.type]:
        for meta in getattr(kind, "__metadata__", ()):
            if isinstance(meta, msgspec.Meta) and meta.description:
                return meta.description
    return ""


# -- msgspec's message -> one line naming the field -------------------------------------------------

_PATH = re.compile(r"^(?P<message>.*?)(?: - at `(?P<key>key` in `)?(?P<path>\$[^`]*)`)?$", re.S)
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
_WORDS = {"int": "an integer", "str": "text", "float": "a number", "bool": "true or false", "array": "a list",
          "object": "a mapping", "null": "null"}


def describe(error: msgspec.ValidationError, model: type[Model], data: Any) -> tuple[str, str]:
    """(the dotted field, "" for the whole input or a check that names its field; the problem) of
    msgspec's error converting `data` into `model`."""
    match = _PATH.match(str(error))
    assert match is not None  # the pattern matches any text
    message, path = match["message"], match["path"] or "$"
    cause = error.__cause__
    if isinstance(cause, FieldError):
        path += "." + cause.field
    loc, kind, value = _walk(model, data, path)
    field = ".".join(loc)
    if isinstance(cause, FieldError):
        return field, f"{cause}{_got(value)}"
    if isinstance(cause, ValueError):   # a model's check of itself (naming its field, or not), a from_input's
        return ("" if str(cause).startswith("field '") else field), str(cause)
    if match["key"]:                    # a key of a mapping
        key_type = typing.get_args(kind)[0] if typing.get_origin(kind) is dict else Any
        key = next((k for k in value if not _converts(k, key_type, model.strict)), None) \
            if isinstance(value, dict) else None
        allowed = _literals(key_type)
        problem = f"not one of: {', '.join(map(repr, allowed))}" if allowed else _words(message)
        return field, f"key {key!r}: {problem}"
    if unknown := re.fullmatch(r"Object contains unknown field `(.*)`", message):
        allowed = sorted(f.name for f in fields(kind)) if _is_model(kind) else []
        hint = f"; allowed keys: {', '.join(allowed)}" if allowed else ""
        return "", f"unknown key '{'.'.join([*loc, unknown[1]])}'{hint}"
    if missing := re.fullmatch(r"Object missing required field `(.*)`", message):
        return ".".join([*loc, missing[1]]), "required; add it"
    if message.startswith("Invalid enum value"):
        return field, f"{shorten(repr(value), 120)} is not one of: {', '.join(map(repr, _literals(kind)))}"
    if got := re.fullmatch(r"Expected (.*), got `\w+`", message):
        shown = shorten(repr(value), 120) if _got(value) else kind_of(value)
        return field, f"{_words('Expected ' + got[1])}, got {shown}"
    return field, _words(message) + _got(value)


def _got(value: Any) -> str:
    return "" if isinstance(value, (dict, list)) or value is None else f" (got {shorten(repr(value), 120)})"


def kind_of(value: Any) -> str:
    """What a YAML value is, in words (a mapping, a list, text, ...)."""
    for kind, word in (((dict,), "a mapping"), ((list, tuple), "a list"), ((bool,), "true or false"),
                       ((str,), "text"), ((int, float), "a number"), ((type(None),), "null")):
        if isinstance(value, kind):
            return word
    return type(value).__name__


def _words(message: str) -> str:
    """msgspec's backquoted type names (`int | str`) in words (an integer or text)."""
    def names(match: re.Match[str]) -> str:
        words = [_WORDS.get(n.strip(), n.strip()) for n in match[1].split("|")]
        return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]

    text = "expected " + message.removeprefix("Expected ") if message.startswith("Expected ") else message
    return re.sub(r"`([^`]*)`", names, text)


def _strip(kind: Any) -> Any:
    """`kind` without Annotated metadata."""
    while typing.get_origin(kind) is typing.Annotated:
        kind = typing.get_args(kind)[0]
    return kind


def _is_model(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, msgspec.Struct)


def type_members(kind: Any) -> list[Any]:
    """The types a union (or one type) allows, Annotated stripped."""
    kind = _strip(kind)
    return [_strip(k) for k in typing.get_args(kind)] if _is_union(kind) else [kind]


def _is_union(kind: Any) -> bool:
    return typing.get_origin(kind) in (typing.Union, types.UnionType)


def _literals(kind: Any) -> list[Any]:
    return [v for k in type_members(kind) if typing.get_origin(k) is typing.Literal for v in typing.get_args(k)]


def _converts(value: Any, kind: Any, strict: bool) -> bool:
    try:
        msgspec.convert(value, kind, strict=strict, dec_hook=_decode_hook)
    except msgspec.ValidationError:
        return False
    return True


def _walk(model: type[Model], data: Any, path: str) -> tuple[list[str], Any, Any]:
    """Follow msgspec's error path (`$.a[0].b`, `$.m[...]`: a mapping's value, whose key is found
    by converting each) through the model's types and the data: (field names, type there, value there)."""
    loc: list[str] = []
    kind: Any = model
    value: Any = data
    for name, index in _STEP.findall(path.removeprefix("$")):
        inner = [k for k in type_members(kind) if _is_model(k) or typing.get_origin(k) in (list, dict)]
        kind = inner[0] if inner else Any
        if name:
            kind = next((f.type for f in fields(kind) if f.name == name), Any) if _is_model(kind) else Any
            value = value.get(name) if isinstance(value, dict) else None
            loc.append(name)
        elif index == "...":
            kind = typing.get_args(kind)[1] if typing.get_origin(kind) is dict else Any
            items = value.items() if isinstance(value, dict) else []
            key, value = next(((k, v) for k, v in items if not _converts(v, kind, model.strict)), (None, None))
            loc.append(str(key))
        else:
            kind = typing.get_args(kind)[0] if typing.get_origin(kind) is list else Any
            value = value[int(index)] if isinstance(value, list) and int(index) < len(value) else None
            loc.append(index)
    return loc, kind, value

