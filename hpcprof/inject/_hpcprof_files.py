"""What the start-up hook's modules share (hpcprof.inject): their one line on stderr, which never
raises into the program; the settings the rank wrapper gives them, checked; and the descriptors of
hpcprof's own files, which a program that closes and reopens descriptors cannot swap for its own.
Standard library only."""

from __future__ import annotations

import math
import os
import sys

#: where hpcprof's own descriptors are moved: far above the lowest free number, the one a program's
#: next open() takes, so that a program that closed every descriptor does not get them back for its files
HIGH_FD_SHARE = 0.75


def say(line: str) -> None:
    """`line` on the program's stderr where it takes one; never raises (a closed or broken stderr)."""
    try:
        stream = sys.stderr
        if stream is not None:
            stream.write(line + "\n")
            stream.flush()
    except Exception:
        pass


def rank() -> str:
    """HPCPROF_RANK: ASCII digits, a file name's part (never a path)."""
    value = os.environ.get("HPCPROF_RANK", "0")
    if not (value.isascii() and value.isdigit() and len(value) <= 9):
        raise ValueError(f"HPCPROF_RANK={value[:40]!r} is not a rank number")
    return value


def number(name: str, default: str, low: float, high: float) -> float:
    """The environment's `name`: a finite number within [low, high]."""
    text = os.environ.get(name, default)
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not low <= value <= high:
        raise ValueError(f"{name}={text[:40]!r} is not a number from {low:g} to {high:g}")
    return value


def whole(name: str, default: str, low: int, high: int) -> int:
    """The environment's `name`: an integer within [low, high]."""
    text = os.environ.get(name, default)
    if not (text.isascii() and text.removeprefix("-").isdigit() and len(text) <= 12 and low <= int(text) <= high):
        raise ValueError(f"{name}={text[:40]!r} is not a whole number from {low} to {high}")
    return int(text)


def subdirectory(run_dir: str, name: str) -> str:
    """`run_dir`/`name`, made where missing; never the run directory itself (one removed stays removed)."""
    path = os.path.join(run_dir, name)
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    return path


Identity = tuple[int, int]


def open_high(path: str, flags: int, mode: int = 0o644) -> tuple[int, Identity]:
    """Open `path` onto a high descriptor (close-on-exec); the descriptor and the file's identity."""
    fd = os.open(path, flags | os.O_CLOEXEC, mode)
    try:
        import fcntl
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        floor = int(min(soft if soft > 0 else 1024, 8192) * HIGH_FD_SHARE)
        if floor > fd:
            high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor)
            os.close(fd)
            fd = high
    except (OSError, ValueError):
        pass
    info = os.fstat(fd)
    return fd, (info.st_dev, info.st_ino)


def ours(fd: int | None, identity: Identity | None) -> bool:
    """Whether `fd` is still the file opened as `identity` (not closed, nor another file under its number)."""
    if fd is None or identity is None:
        return False
    try:
        info = os.fstat(fd)
    except OSError:
        return False
    return (info.st_dev, info.st_ino) == identity
