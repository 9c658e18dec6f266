"""The quick lane's reading of a command line (hpcprof.__main__ runs `hpcprof nsys
stats|nccl|overlap|gaps --format csv` without click where it can): the standard library only, shared
by stats_command and quick_analyses. Anything it is not sure of is left to click."""

from __future__ import annotations


def as_pathlib_prints(path: str) -> bool:
    """Whether pathlib prints `path` unchanged (click hands the command a Path, whose text the messages
    and `#` lines show: `./a//b` prints as `a/b`)."""
    return path not in ("", ".") and "//" not in path and not path.startswith("./") and "/./" not in path \
        and not path.endswith(("/", "/."))


def split_argv(argv: list[str], options: dict[str, str]) -> tuple[list[str], dict[str, str]] | None:
    """(files, {option's key: value}) of `argv`, where `options` maps each spelling the lane reads to its
    key and every option takes a value (`-o X`, `--output X`, `--output=X`), each key given once and
    every file printing as pathlib would; None for any other command line."""
    files: list[str] = []
    given: dict[str, str] = {}
    args = iter(argv)
    for arg in args:
        if not arg.startswith("-"):
            if not as_pathlib_prints(arg):
                return None
            files.append(arg)
            continue
        option, eq, value = arg.partition("=")
        key = options.get(option)
        if key is None or key in given or (eq and not option.startswith("--")):
            return None
        if not eq:
            value = next(args, "-")
        if not value or value.startswith("-"):
            return None
        given[key] = value
    return files, given
