"""Command-line flags <-> the workloads' Args models, and the one-line bad-input exit.

Bad values are one line naming the flag's field (`hpcprof.core.models.validate`, as for configs)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, NoReturn, TypeVar

import msgspec

from hpcprof.core.errors import UserError
from hpcprof.core.models import Model, field_help, fields, given_fields, type_members, validate

if TYPE_CHECKING:
    import argparse

ArgsT = TypeVar("ArgsT", bound=Model)


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def build_parser(model: type[Model], prog: str, description: str,
                 aliases: Mapping[str, Sequence[str]]) -> argparse.ArgumentParser:
    """An argparse parser with one flag per model field (`sequence_length` -> `--sequence-length`).

    Values stay strings and are validated by the model; `aliases` adds extra spellings per field.
    Unset flags are left out, so `given_fields` says what the user gave.
    """
    import argparse  # here: rendering (which calls to_argv) does not need it

    parser = argparse.ArgumentParser(prog=prog, description=description, argument_default=argparse.SUPPRESS)
    for field in fields(model):
        flags = [*aliases.get(field.name, ()), flag_name(field.name)]
        default = "" if field.default in (None, msgspec.NODEFAULT) else f" (default: {field.default})"
        help_text = field_help(field) + default
        if bool in type_members(field.type):
            parser.add_argument(*flags, dest=field.name, action=argparse.BooleanOptionalAction, help=help_text)
        else:
            parser.add_argument(*flags, dest=field.name, metavar=field.name.upper(), help=help_text)
    return parser


def parse_argv(model: type[ArgsT], parser: argparse.ArgumentParser, argv: Sequence[str], source: str) -> ArgsT:
    """Parse flags into the model; unknown flags and bad values raise UserError."""
    namespace, extra = parser.parse_known_args(list(argv))
    if extra:
        raise UserError(f"{source}: unknown argument(s): {' '.join(extra)}")
    return validate(model, vars(namespace), source)


def to_argv(args: Model) -> list[str]:
    """The flags that reproduce `args`: every field the user gave, in declaration order."""
    given = given_fields(args)
    out: list[str] = []
    for field in fields(type(args)):
        value = getattr(args, field.name)
        if field.name not in given or value is None:
            continue
        if isinstance(value, bool):
            out.append(flag_name(field.name) if value else "--no-" + field.name.replace("_", "-"))
        else:
            out += [flag_name(field.name), str(value)]
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
