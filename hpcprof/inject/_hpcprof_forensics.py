"""Forensics armed in a rank's Python (hpcprof.analysis.forensics reads what this writes), all in
$HPCPROF_RUN_DIR/forensics/:

- `stacks_rank{R}.txt`: a first line naming the rank's process (rank, pid, host, start time);
  Python's faulthandler writes every thread's stack there on a fatal signal (SIGSEGV, SIGFPE,
  SIGABRT, SIGBUS, SIGILL: the rank still dies of it), on SIGTERM (a launcher stopping it, the
  walltime: it then dies of it as before) and on SIGUSR1 (it goes on); each dump the job asks for
  adds a block headed with its reason, time and main thread. A file that holds
  only the first line when the program exits is removed.
- `exception_rank{R}.json`: the uncaught exception that ended the program (type, message, the
  traceback's frames, time), written after Python printed the traceback. Only the interpreter's
  call of sys.excepthook counts: a program that shows a handled error through it (code.py, a
  logging helper) pays nothing. The same process re-executing itself (os.execv) is armed again.
- `memory_rank{R}.pickle`: where that exception is CUDA's OutOfMemoryError, PyTorch's memory
  snapshot at that moment (_hpcprof_memory.dump_snapshot).
- `fr_rank{R}` / `fr_nccl_rank{R}`: PyTorch's Flight Recorder buffers (the one Gloo records into,
  NCCL's) as torch's `_dump_fr_trace` / `_dump_nccl_trace` give them (the pickle PyTorch's
  `fr_trace` reads), with the process groups filled in from torch.distributed where the dump's
  `pg_config` does not name its entries' groups (Gloo's, in torch 2.13), and an `hpcprof` key
  (rank, time, reason). A request's dump, and the first failing rank's, replace the rank's earlier
  one; a later exception's does not (the dump at the incident is the state to explain: a rank that
  skipped a collective later enters another one under the same sequence number).
  Without the entries' stack traces: symbolising them the first time in a process took 9-12 s
  on this 2-core machine (torch 2.13); each rank's stacks are in its stacks file instead.
- `dump.request` (a reason, then a time, a line each): written by the first rank whose program
  raises (`first_exception` marks it), by the job on its walltime warning, and by `hpcprof logs RUN
  --hang` for a running run; every rank's watcher thread looks for it every HPCPROF_FORENSICS_POLL
  seconds (one stat) and then dumps its stacks and Flight Recorder. A rank whose program raised
  waits HPCPROF_FORENSICS_WAIT seconds before it exits, so that the others dump before the
  launcher stops them.

Invisible to the program: the watcher is a bare thread (not in threading.enumerate(), joined by no
one); a forked child keeps every handler as it was, the stacks file's descriptor there pointed at
/dev/null; the stacks file's descriptor is a high one, checked before the watcher writes (a program
that closed it keeps its own files); only the `forensics/` directory is made. A bad setting or an
unwritable run directory: one line on stderr, nothing armed.

Nothing here imports torch: the Flight Recorder is dumped only where the program itself imported
torch.distributed and initialised a process group.
"""

from __future__ import annotations

import _thread
import atexit
import faulthandler
import os
import signal
import sys
import threading
import time
from types import FrameType, TracebackType

from _hpcprof_files import number, open_high, ours, say, subdirectory
from _hpcprof_files import rank as rank_setting

#: what arm() set up: the forensics directory, this rank, the stacks file's descriptor, ... (json,
#: pickle, traceback, typing and re are imported where used: at start-up they cost every rank ~20 ms)
_state: dict = {}


def arm() -> None:
    """Open the stacks file, hand it to faulthandler, hook uncaught exceptions, start the watcher.
    A bad setting or a run directory it cannot write: one line, and nothing armed."""
    try:
        rank = rank_setting()
        poll = number("HPCPROF_FORENSICS_POLL", "1", 0.01, 3600)
        wait = number("HPCPROF_FORENSICS_WAIT", str(2 * poll + 0.5), 0, 3600)
        directory = subdirectory(os.environ["HPCPROF_RUN_DIR"], "forensics")
        path = os.path.join(directory, f"stacks_rank{rank}.txt")
        fd, identity = open_high(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    except (OSError, ValueError) as exc:
        say(f"hpcprof: forensics not armed ({type(exc).__name__}: {exc})")
        return
    _legacy_names()
    head = f"# hpcprof: rank {rank} pid {os.getpid()} host {os.uname().nodename} started {time.time():.3f}\n"
    os.write(fd, head.encode())
    _state.update(directory=directory, rank=rank, fd=fd, identity=identity, path=path, bare=os.fstat(fd).st_size,
                  poll=poll, wait=wait, pid=os.getpid(), request=os.path.join(directory, "dump.request"),
                  nccl_dump=os.environ.get("TORCH_FR_DUMP_TEMP_FILE") or os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE"))
    if not faulthandler.is_enabled():  # PYTHONFAULTHANDLER / -X faulthandler: the user's, to stderr
        faulthandler.enable(fd, all_threads=True)
    if signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL:
        faulthandler.register(signal.SIGUSR1, fd, all_threads=True, chain=False)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:  # then dies of it as before (chain: the default action)
        faulthandler.register(signal.SIGTERM, fd, all_threads=True, chain=True)
    os.register_at_fork(after_in_child=_disarm_child)
    previous = sys.excepthook

    def excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        previous(kind, value, tb)  # the traceback first, as without hpcprof
        if _state.get("pid") != os.getpid() or not _uncaught():
            return  # a forked child's, or a handled error the program shows (code.InteractiveInterpreter)
        try:
            _on_exception(kind, value, tb)
        except Exception:
            pass

    sys.excepthook = excepthook
    if previous is sys.__excepthook__:  # `sys.excepthook is sys.__excepthook__` holds as before (code.py's test)
        sys.__excepthook__ = excepthook
    atexit.register(_at_exit)
    _state["seen"] = _stamp(_state["request"])
    # a bare thread: not in threading.enumerate() nor active_count(), joined by no one, gone at exit
    _thread.start_new_thread(_watch, ())


def _uncaught() -> bool:
    """Whether the interpreter called sys.excepthook (directly or through hooks chained to this one,
    torch.distributed's) for an uncaught exception: the main thread's stack has unwound, no module's
    code runs. A program showing a handled error (code.py, a logging helper) calls it from its code."""
    if threading.get_ident() != threading.main_thread().ident:
        return False
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>":
            return False
        frame = frame.f_back
    return True


#: the Flight Recorder's variables (torch >= 2.8) -> the names torch before 2.8 reads
LEGACY = {"TORCH_FR_BUFFER_SIZE": "TORCH_NCCL_TRACE_BUFFER_SIZE",
          "TORCH_FR_DUMP_TEMP_FILE": "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"}


def _legacy_names() -> None:
    """Where the rank's torch is older than 2.8 (its version.py read, torch not imported), set the
    Flight Recorder's variables under the NCCL names it reads, where they are unset."""
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return
    try:
        with open(os.path.join(next(iter(spec.submodule_search_locations)), "version.py")) as fh:
            line = next((t for t in fh if t.startswith("__version__")), "")
    except OSError:
        return
    parts = line.partition("=")[2].strip().strip("'\"").split(".")
    if len(parts) > 1 and parts[0].isdigit() and parts[1].isdigit() and (int(parts[0]), int(parts[1])) < (2, 8):
        for name, old in LEGACY.items():
            if name in os.environ and old not in os.environ:
                os.environ[old] = os.environ[name]


def _disarm_child() -> None:
    """A forked child (a data loader worker) is not the rank: it writes nothing to the rank's files.
    Its handlers stay as they are (the program's own, faulthandler's): the stacks file's descriptor,
    where still the rank's, becomes /dev/null, so what faulthandler writes there goes nowhere."""
    fd = _state.get("fd")
    if fd is not None and ours(fd, _state.get("identity")):
        null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        os.dup2(null, fd, inheritable=False)
        os.close(null)
    _state.clear()


def _at_exit() -> None:
    """Remove the stacks file when nothing but its first line was written."""
    fd = _state.get("fd")
    if fd is None or not ours(fd, _state.get("identity")):
        return
    try:
        if os.fstat(fd).st_size <= _state["bare"]:
            os.unlink(_state["path"])
    except OSError:
        pass


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size, info.st_ino


def _nccl_dumped() -> bool:
    """Whether a rank's Flight Recorder wrote its dump (`TORCH_FR_DUMP_TEMP_FILE<rank>`: NCCL's watchdog
    on a collective that timed out), which no Python exception announces: the stacks of that moment
    show where each rank was (the one that never entered the collective), not where it is when the
    aborted process finally ends."""
    prefix = _state.get("nccl_dump")
    if not prefix or _state.get("nccl_seen"):
        return False
    directory, name = os.path.split(prefix)
    try:
        return any(entry.startswith(name) and not entry.endswith(".tmp") for entry in os.listdir(directory or "."))
    except OSError:
        return False


def _watch() -> None:
    """Dump on every new dump.request, and once when a rank's Flight Recorder dumped (_nccl_dumped);
    a failure ends the watch in silence (the program's stderr is its own)."""
    try:
        _watching()
    except BaseException:
        pass


def _watching() -> None:
    poll = _state["poll"]
    while True:
        time.sleep(poll)
        if not _state:
            return
        if _nccl_dumped():
            _state["nccl_seen"] = True
            _dump("Flight Recorder's dump (NCCL's watchdog saw a collective time out)")
            continue
        stamp = _stamp(_state["request"])
        if stamp is not None and stamp != _state.get("seen") and not _state.get("failing"):  # failing: dumped
            _state["seen"] = stamp
            try:
                with open(_state["request"], encoding="utf-8", errors="replace") as fh:
                    reason = fh.readline(200).strip() or "requested"
            except OSError:
                reason = "requested"
            _dump(reason)


def _stacks() -> int:
    """The stacks file's descriptor; where the program closed it (and maybe reused its number for a
    file of its own), the file opened again by its path."""
    if not ours(_state["fd"], _state["identity"]):
        _state["fd"], _state["identity"] = open_high(_state["path"], os.O_WRONLY | os.O_APPEND)
    return int(_state["fd"])


def _dump(reason: str) -> None:
    now = time.time()
    main = threading.main_thread().ident or 0
    fd = _stacks()
    os.write(fd, f"# hpcprof: stacks of rank {_state['rank']} pid {os.getpid()} at {now:.3f} "
                 f"({reason}); main thread 0x{main:016x}\n".encode())
    faulthandler.dump_traceback(fd, all_threads=True)
    os.write(fd, b"\n")
    _flight_recorder(reason, replace=True)


def _write(path: str, data: bytes) -> None:
    """`path` whole or not at all."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _groups() -> dict[str, dict[str, str]]:
    """The process groups as the Flight Recorder's `pg_config` names them: name -> desc, global ranks."""
    from torch.distributed import distributed_c10d as c10d

    world = c10d._world
    return {str(name): {"name": str(name), "desc": str(getattr(pg, "group_desc", "undefined")),
                        "ranks": str(sorted(world.pg_group_ranks.get(pg) or {}))}
            for pg, name in list(world.pg_names.items())}


def _flight_recorder(reason: str, replace: bool) -> None:
    """Dump each Flight Recorder buffer that holds entries (`replace`: over an earlier dump of this rank)."""
    import pickle

    dist = sys.modules.get("torch.distributed")
    c_module = sys.modules.get("torch._C._distributed_c10d")
    try:
        if dist is None or c_module is None or not dist.is_available() or not dist.is_initialized():
            return
        rank = dist.get_rank()
    except Exception:
        return
    for prefix, function in (("fr", "_dump_fr_trace"), ("fr_nccl", "_dump_nccl_trace")):
        dump = getattr(c_module, function, None)
        path = os.path.join(_state["directory"], f"{prefix}_rank{rank}")
        if dump is None or (not replace and os.path.exists(path)):
            continue
        try:
            data = pickle.loads(dump(True, False, False))  # no stack traces: their first symbolisation takes seconds
            if not data.get("entries"):
                continue
            note: dict = {"rank": rank, "time_ns": time.time_ns(), "reason": reason, "pid": os.getpid()}
            named = {entry["process_group"][0] for entry in data["entries"]}
            if not named <= set(data.get("pg_config") or {}):
                note["pg_config_dumped"] = data.get("pg_config")
                data["pg_config"] = _groups()
            data["hpcprof"] = note
            _write(path, pickle.dumps(data))
        except Exception as exc:  # one buffer that cannot be dumped does not stop the other
            os.write(_stacks(), f"# hpcprof: {function} failed: {type(exc).__name__}: {exc}\n".encode())


def _request(reason: str) -> bool:
    """Ask every rank to dump, when this is the first rank whose program raised (`first_exception`
    made here); False when another rank was first."""
    try:
        fd = os.open(os.path.join(_state["directory"], "first_exception"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError:
        return False
    os.close(fd)
    _write(_state["request"], f"{reason}\n{time.time():.3f}\n".encode())
    _state["seen"] = _stamp(_state["request"])
    return True


def _on_exception(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    """Record the exception, dump the Flight Recorder, ask the others to dump and give them time."""
    import json
    import traceback

    _state["failing"] = True  # its watcher dumps no more: the state is its exception's
    now = time.time()
    rank = _state["rank"]
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    frames = [[f.filename, f.lineno, f.name] for f in traceback.extract_tb(tb)][-40:]
    record = {"rank": int(rank), "pid": os.getpid(), "host": os.uname().nodename, "time": now, "type": name,
              "message": str(value)[:4000], "frames": frames}
    path = os.path.join(_state["directory"], f"exception_rank{rank}.json")
    if not os.path.exists(path):
        _write(path, json.dumps(record).encode())
    if kind.__name__ == "OutOfMemoryError":  # what held the memory: the allocator's blocks (and stacks where recorded)
        import _hpcprof_memory

        _hpcprof_memory.dump_snapshot(os.path.join(_state["directory"], f"memory_rank{rank}.pickle"))
    _flight_recorder(f"exception on rank {rank}", replace=_request(f"exception on rank {rank}"))
    # every failing rank waits (not only the first): a launcher that stops the job at the first rank
    # that exits (srun --kill-on-bad-exit, Hydra) would stop the others before their watcher dumped
    time.sleep(_state["wait"])
