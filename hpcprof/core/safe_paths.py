"""The paths hpcprof writes, deletes and reads, each rule enforced in one function.

- `check_confined(root, *subdirs)`: nothing is written, deleted or chmod-ed through a symbolic link
  that leads out of a run directory. collect checks the trees it writes and cleans (results/,
  derived/ and all below) once per run, before it writes or deletes anything there; a link out of
  the run directory (even into another run) refuses the run in one line, and nothing is touched.
  Links that stay inside the run directory are followed as before. (A link made while collect runs
  is not looked for: the check is against careless set-ups, not a concurrent attacker.)
- `check_output(path, inputs, option)`: a user's output (`report --html`, `compare -o`, `trace ... -o`,
  `nsys ... -o`, `ncu ... -o`, Echo's tables, `sites init -o`) never replaces one of the command's
  inputs, a file of a workdir (the store `hpcprof.db` and its -wal/-shm/-journal, the -wal/-shm/-journal
  beside any SQLite database, anything in a run
  directory), a data file hpcprof reads (SQLite, Parquet, Arrow, gzip), a directory, a special file
  (FIFO, device, socket) or a symbolic link: all refused in one line (exit 2) before anything is
  written. Links are refused, not written through: `-o /dev/stdout` and the like are special files,
  and the way to write to stdout is to leave -o out; a link to a regular file is named with its
  target, which is the path to give.
- `open_regular`, `read_regular`, `read_tail`: every file hpcprof reads from a run directory (config.json,
  status, submission.json, the stored-state notes, headline.json, the workload's result JSON, job and
  rank logs) and the profiles it analyses is opened without waiting (O_NONBLOCK: a FIFO's open does
  not wait for a writer) and read only if it is a regular file (links followed); the small run files
  within a size bound. A FIFO, a device (/dev/zero) or an over-large file is an `UnsafeFile` error
  (an OSError: the callers' handling of an unreadable file names it).
- `inflate_limit(size)`: how far gzip data of `size` bytes may inflate (trace loading); beyond it the
  data is refused as a decompression bomb.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from hpcprof.core.errors import UnsafeFile, UserError

#: the most bytes read of a small run file (config.json, status, submission.json, notes, headline.json)
SMALL_FILE = 16 << 20
#: the most bytes read of one workload result JSON file in results/
RESULT_FILE = 256 << 20
#: gzip data inflates to at most this many times its size (Kineto traces: 8-15x), and at least to INFLATE_FLOOR
INFLATE_RATIO = 200
INFLATE_FLOOR = 256 << 20
#: file names of the campaign store (SQLite) and the files SQLite keeps beside it
STORE_NAME = re.compile(r"hpcprof\.db(-wal|-shm|-journal)?")
#: the files SQLite keeps beside a database (any name): `<database>-wal`, `-shm`, `-journal`
SQLITE_JOURNAL = re.compile(r"(.+)-(?:wal|shm|journal)")
#: files that make a directory a run directory (with its config.json)
RUN_MARKS = ("job.sh", "status", "submission.json", "rank_wrapper.sh")
#: the leading bytes of the data files hpcprof reads, which an output never replaces
DATA_MAGIC = {b"SQLite format 3\x00": "an SQLite database", b"\x37\x7f\x06\x82": "an SQLite write-ahead log",
              b"\x37\x7f\x06\x83": "an SQLite write-ahead log", b"PAR1": "a Parquet file", b"ARROW1": "an Arrow file",
              b"\x1f\x8b": "gzip data"}


# ---- writing and deleting inside a run directory --------------------------------------------------------

def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def check_confined(root: Path, *subdirs: str) -> None:
    """Refuse (UserError naming the link) when `root/sub` for a `sub` of `subdirs`, or any directory
    below it, is a symbolic link whose target is outside `root` (resolved). Links below are found by
    one walk of each tree (links not followed); a tree that does not exist is fine."""
    real_root = os.path.realpath(root)
    for sub in subdirs:
        top = Path(root) / sub
        current = Path(root)
        for part in Path(sub).parts:  # the way down to the tree: results, derived, derived/nsys ...
            current = current / part
            _check_link(current, real_root)
        if not os.path.isdir(top):
            continue
        for directory, dirnames, _ in os.walk(top):
            for name in dirnames:   # os.walk lists links to directories here and does not enter them
                _check_link(Path(directory) / name, real_root)


def _check_link(path: Path, real_root: str) -> None:
    if not os.path.islink(path):
        return
    target = os.path.realpath(path)
    if not _inside(target, real_root):
        raise UserError(f"{path}: a symbolic link out of the run directory (to {target}); hpcprof writes and "
                        "deletes files there, so it touched nothing: replace the link by a directory")


# ---- a user's output --------------------------------------------------------------------------------------

def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _run_directory(path: str) -> str | None:
    """The run directory `path` (resolved) is in, or None."""
    for directory in Path(path).parents:
        if (directory / "config.json").is_file() and any((directory / m).exists() for m in RUN_MARKS):
            return str(directory)
    return None


def _data_kind(path: Path) -> str | None:
    try:
        with open(path, "rb") as fh:
            head = fh.read(16)
    except OSError:
        return None
    return next((kind for magic, kind in DATA_MAGIC.items() if head.startswith(magic)), None)


def check_output(path: Path, inputs: Iterable[Path] = (), option: str = "-o") -> None:
    """Refuse (UserError: one line, exit 2) an output path that would replace one of `inputs`, a file
    of a workdir (the store and its -wal/-shm/-journal, anything in a run directory), a data file
    hpcprof reads, a directory, a special file or a symbolic link (see the module's docstring)."""
    path = Path(path)
    try:
        info: os.stat_result | None = os.lstat(path)
    except OSError:      # nothing there (or no way to it: the write says why)
        info = None

    def refuse(why: str, fix: str = "give another path") -> UserError:
        return UserError(f"{option} {path}: {why}; nothing was written: {fix}")

    if info is not None and stat.S_ISLNK(info.st_mode):
        raise refuse(f"a symbolic link (to {os.readlink(path)}); hpcprof does not write through links",
                     "give the path it points to, or leave -o out to write to stdout")
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise refuse("a directory", "give a file's path")
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise refuse(f"{_kind(info.st_mode)}, which would be replaced by a regular file",
                     "give a file's path, or leave -o out to write to stdout")
    for source in inputs:
        try:
            same = info is not None and os.path.samefile(path, source)
        except OSError:
            same = False
        if same:
            raise refuse("that is an input of this command", "write the output to another file")
    real = os.path.realpath(path)
    if STORE_NAME.fullmatch(os.path.basename(real)):
        raise refuse("the name of a campaign store (or its SQLite journal)")
    if (journal := SQLITE_JOURNAL.fullmatch(real)) and _data_kind(Path(journal[1])) == "an SQLite database":
        raise refuse(f"the SQLite journal of the database {journal[1]} (a store's committed data may be there)")
    if (run := _run_directory(real)) is not None:
        raise refuse(f"inside the run directory {run}, whose files hpcprof writes and reads",
                     "give a path outside the run directory")
    if info is not None and (kind := _data_kind(path)) is not None:
        raise refuse(f"the file holds {kind}, which hpcprof reads and never overwrites with a report")


# ---- reading -------------------------------------------------------------------------------------------------

def open_regular(path: Path | str) -> BinaryIO:
    """`path` opened for reading in binary, if it is a regular file (links followed): a FIFO is opened
    without waiting for a writer and then refused, as is a device, a socket or a directory (UnsafeFile)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = "a directory" if stat.S_ISDIR(mode) else _kind(mode)
            raise UnsafeFile(errno.EINVAL, f"not a regular file ({what}); hpcprof reads regular files only",
                             str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path | str, limit: int | None = SMALL_FILE) -> bytes:
    """The bytes of the regular file `path` (open_regular), at most `limit` of them (None: all): a
    larger file is an UnsafeFile error, read no further than the bound."""
    with open_regular(path) as fh:
        data = fh.read() if limit is None else fh.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise UnsafeFile(errno.EFBIG, f"larger than {limit >> 20} MB, more than hpcprof reads of such a file",
                         str(path))
    return data


def read_tail(path: Path | str, size: int) -> bytes:
    """The last `size` bytes of the regular file `path` (open_regular)."""
    with open_regular(path) as fh:
        end = fh.seek(0, os.SEEK_END)
        fh.seek(max(0, end - size))
        return fh.read(size)


def append_regular(path: Path | str, data: bytes) -> None:
    """Append `data` to the regular file `path` (made if missing): a FIFO without a reader is an
    error at once, not a wait; a device or a directory is refused (UnsafeFile)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnsafeFile(errno.EINVAL, f"not a regular file ({_kind(mode)}); hpcprof writes regular files only",
                             str(path))
        os.set_blocking(fd, True)
        os.write(fd, data)
    finally:
        os.close(fd)


def inflate_limit(size: int) -> int:
    """The most bytes gzip data of `size` bytes may inflate to: INFLATE_RATIO times, at least INFLATE_FLOOR."""
    return max(INFLATE_FLOOR, INFLATE_RATIO * size)
