"""Command-line flags <-> the workloads' pydantic Args models, and the one-line bad-input exit."""

from __future__ import annotations

import argparse
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn, TypeVar

from pydantic import BaseModel, ValidationError

from hpcprof.errors import UserError

ArgsT = TypeVar("ArgsT", bound=BaseModel)


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def _is_bool(annotation: Any) -> bool:
    if annotation is bool:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return bool in typing.get_args(annotation)
    return False


def build_parser(model: type[BaseModel], prog: str, description: str, aliases: Mapping[str, Sequence[str]]) -> argparse.ArgumentParser:
    """An argparse parser with one flag per model field (`sequence_length` -> `--sequence-length`).

    Values stay strings and are validated by the model; `aliases` adds extra spellings per field.
    Unset flags are left out, so `model_fields_set` says what the user gave.
    """
    parser = argparse.ArgumentParser(prog=prog, description=description, argument_default=argparse.SUPPRESS)
    for name, info in model.model_fields.items():
        flags = [*aliases.get(name, ()), flag_name(name)]
        default = "" if info.default is None else f" (default: {info.default})"
        help_text = (info.description or "") + default
        if _is_bool(info.annotation):
            parser.add_argument(*flags, dest=name, action=argparse.BooleanOptionalAction, help=help_text)
        else:
            parser.add_argument(*flags, dest=name, metavar=name.upper(), help=help_text)
    return parser


def validation_message(exc: ValidationError, source: str) -> str:
    """One line naming each bad field: `seqpar: precision: Input should be ... (got 'x')`."""
    parts = []
    for err in exc.errors():
        field = ".".join(str(x) for x in err["loc"]) or "args"
        got = f" (got {err['input']!r})" if err["type"] != "missing" and not isinstance(err["input"], dict) else ""
        parts.append(f"{field}: {err['msg']}{got}")
    return f"{source}: " + "; ".join(parts)


def validate(model: type[ArgsT], values: dict[str, Any], source: str) -> ArgsT:
    """Build the model; a ValidationError becomes a one-line UserError naming the field."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise UserError(validation_message(exc, source)) from None


def parse_argv(model: type[ArgsT], parser: argparse.ArgumentParser, argv: Sequence[str], source: str) -> ArgsT:
    """Parse flags into the model; unknown flags and bad values raise UserError."""
    namespace, extra = parser.parse_known_args(list(argv))
    if extra:
        raise UserError(f"{source}: unknown argument(s): {' '.join(extra)}")
    return validate(model, vars(namespace), source)


def to_argv(args: BaseModel) -> list[str]:
    """The flags that reproduce `args`: every field the user set, in declaration order."""
    out: list[str] = []
    for name in type(args).model_fields:
        if name not in args.model_fields_set:
            continue
        value = getattr(args, name)
        if value is None:
            continue
        if isinstance(value, bool):
            out.append(flag_name(name) if value else "--no-" + name.replace("_", "-"))
        else:
            out += [flag_name(name), str(value)]
    return out


def run_module_main(main: Callable[[Sequence[str]], int], argv: Sequence[str] | None = None) -> NoReturn:
    """`python -m` entry: run `main`; a UserError prints one line on stderr and exits 2."""
    try:
        code = main(sys.argv[1:] if argv is None else argv)
    except UserError as exc:
        sys.stderr.write(f"error: {exc.format_message()}\n")  # one write: lines of ranks stay whole
        sys.stderr.flush()
        sys.exit(2)
    sys.exit(code)
