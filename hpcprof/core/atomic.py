"""Every file hpcprof writes goes through `atomic_write`: a unique temporary name beside the
target, then a rename, so a reader never sees half a file and a failed write (a full disk, an
unwritable directory, SIGTERM) leaves nothing behind: the temporary file is removed on any
failure, and on SIGTERM by a handler that removes the temporaries in flight and then dies of the
signal as before; before dying, the handler stops the worker processes registered by
`stop_on_sigterm` with SIGTERM and waits briefly for them, so that their own handlers remove their
temporaries too. Temporaries a killed process (SIGKILL) left are removed by `remove_stale_temps`
once their process is gone. A user's output (a write given `inputs`) is checked first by
hpcprof.core.safe_paths.check_output: never an input, a workdir's own file, a special file or a link.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TextIO

from hpcprof.core.errors import UserError
from hpcprof.core.safe_paths import check_output

#: `.<name>.<host>-<pid>.<random>.tmp[<suffix>]`: the writer's host and PID tell whether a leftover is stale
TEMP_NAME = re.compile(r"^\..+\.([A-Za-z0-9\-]*)-(\d+)\.[0-9a-f]{16}\.tmp(?:\.[A-Za-z0-9]+)?$")
#: a leftover of another host's writer is stale after this long (seconds) untouched
OTHER_HOST_STALE = 3600
HOST = re.sub(r"[^A-Za-z0-9\-]", "-", os.uname().nodename)[:64]  # gethostname(); no socket import
#: how long (seconds) a process stopped by SIGTERM waits for its workers to remove their temporaries
WORKERS_GRACE = 5.0
_in_flight: set[Path] = set()
os.register_at_fork(after_in_child=_in_flight.clear)   # a forked worker's temporaries are its own
_previous_handler: object = None
#: the registering process's PID and its functions naming its worker processes (a forked worker
#: inherits them, and must not stop its siblings)
_workers: tuple[int, list[Callable[[], Iterable[int]]]] = (0, [])


def stop_on_sigterm(workers: Callable[[], Iterable[int]]) -> None:
    """On SIGTERM, before this process dies, the processes `workers()` names (its pool workers,
    whose own handlers remove their temporaries in flight) get SIGTERM, and are waited for up to
    WORKERS_GRACE seconds (a worker still busy then dies with this process, e.g. by
    PR_SET_PDEATHSIG; the next collect's remove_stale_temps removes what it left)."""
    global _workers
    if _workers[0] != os.getpid():
        _workers = (os.getpid(), [])
    if workers not in _workers[1]:
        _workers[1].append(workers)
    _watch_sigterm()


def _stop_workers() -> None:
    owner, named = _workers
    if owner != os.getpid():
        return
    pids = set()
    for workers in named:
        for pid in workers():
            try:
                os.kill(pid, signal.SIGTERM)
                pids.add(pid)
            except OSError:
                pass
    deadline = time.monotonic() + WORKERS_GRACE
    while pids and time.monotonic() < deadline:
        pids = {pid for pid in pids if _alive(pid)}
        time.sleep(0.005)


def _on_sigterm(signum: int, frame: object) -> None:
    """Remove the temporaries in flight, stop the workers (stop_on_sigterm), then die of SIGTERM
    (or run the handler there was)."""
    for path in list(_in_flight):
        try:
            path.unlink()
        except IsADirectoryError:       # a temporary directory (track_temporary)
            shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass
    _stop_workers()
    if callable(_previous_handler):
        _previous_handler(signum, frame)
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _watch_sigterm() -> None:
    global _previous_handler
    if threading.current_thread() is not threading.main_thread():
        return
    current = signal.getsignal(signal.SIGTERM)
    if current is not _on_sigterm and current is not signal.SIG_IGN:
        _previous_handler = current if callable(current) else None
        signal.signal(signal.SIGTERM, _on_sigterm)


def track_temporary(path: Path, tracked: bool = True) -> None:
    """Have the SIGTERM handler remove the temporary directory `path` (named by temp_path) while it is
    `tracked` (False: no longer, once its owner removed it)."""
    if tracked:
        _watch_sigterm()
        _in_flight.add(path)
    else:
        _in_flight.discard(path)


class WriteError(UserError):
    """A file that could not be written (nothing of it is left); `strerror` says why."""

    def __init__(self, message: str, strerror: str) -> None:
        super().__init__(message)
        self.strerror = strerror


def temp_path(path: Path, suffix: str = "") -> Path:
    """A temporary name beside `path`, unique across processes and threads, ending in `suffix`
    (for a writer that insists on its extension, e.g. `nsys export`)."""
    return path.with_name(f".{path.name}.{HOST}-{os.getpid()}.{os.urandom(8).hex()}.tmp{suffix}")


def atomic_write(path: Path, content: str | bytes | Callable[[Path], None], *,
                 what: str = "", inputs: Iterable[Path] | None = None, option: str = "-o", suffix: str = "") -> Path:
    """Write `content` (text, bytes, or a function writing a given temporary path, which ends in
    `suffix`) to `path`: whole or not at all. A failure to write is one line naming `path` (and
    `what` it is). `inputs` given (perhaps empty): `path` is a user's output, given by `option`,
    checked by safe_paths.check_output before anything is written."""
    path = Path(path)
    if inputs is not None:
        check_output(path, inputs, option)
    tmp = temp_path(path, suffix)
    _watch_sigterm()
    _in_flight.add(tmp)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if callable(content):
            content(tmp)
        elif isinstance(content, str):
            with open(tmp, "x", encoding="utf-8", newline="") as fh:   # x: never through a planted link
                fh.write(content)
        else:
            with open(tmp, "xb") as fh:
                fh.write(content)
        os.replace(tmp, path)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise WriteError(f"{what + ' ' if what else ''}{path}: cannot write ({reason}); nothing was written there",
                         reason) from None
    finally:
        _in_flight.discard(tmp)
        try:
            tmp.unlink()
        except OSError:
            pass
    return path


def write_text_stream(path: Path, write: Callable[[TextIO], None], *, what: str = "",
                      inputs: Iterable[Path] | None = None, option: str = "-o") -> Path:
    """`atomic_write` for a writer of an open text file (csv, json, tables)."""
    def to(tmp: Path) -> None:
        with open(tmp, "x", encoding="utf-8", newline="") as fh:
            write(fh)
    return atomic_write(path, to, what=what, inputs=inputs, option=option)


def _alive(pid: int) -> bool:
    """Whether process `pid` still runs: a zombie (a killed writer no one reaped yet, e.g. a pool
    worker whose parent died, in a container whose PID 1 does not reap) writes nothing more."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return True
    return state not in (b"Z", b"X")


def _stale(name: str, path: str) -> bool:
    match = TEMP_NAME.match(name)
    if not match:
        return False
    host, pid = match[1], int(match[2])
    if host == HOST:
        return pid != os.getpid() and not _alive(pid)
    try:
        return time.time() - os.stat(path).st_mtime > OTHER_HOST_STALE
    except OSError:
        return False


def remove_stale_temps(directory: Path) -> int:
    """Remove the temporaries under `directory` whose writer is gone (killed mid-write: its
    PID is gone on this host, or another host's has not touched it for an hour), files and
    temporary directories (named by temp_path) alike; returns how many."""
    removed = 0
    for root, dirs, files in os.walk(directory):
        for name in list(dirs):
            path = os.path.join(root, name)
            if _stale(name, path):
                dirs.remove(name)
                shutil.rmtree(path, ignore_errors=True)
                removed += 1
        for name in files:
            path = os.path.join(root, name)
            if _stale(name, path):
                try:
                    os.unlink(path)
                    removed += 1
                except OSError:
                    pass
    return removed
