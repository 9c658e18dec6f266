"""The quick lane's rule for the file arguments it takes (hpcprof.__main__ runs `hpcprof nsys
stats|nccl|overlap|gaps --format csv` without click where it can): the standard library only, shared
by stats_command and quick_analyses."""


def as_pathlib_prints(path: str) -> bool:
    """Whether pathlib prints `path` unchanged (click hands the command a Path, whose text the messages
    and `#` lines show: `./a//b` prints as `a/b`)."""
    return path not in ("", ".") and "//" not in path and not path.startswith("./") and "/./" not in path \
        and not path.endswith(("/", "/."))
