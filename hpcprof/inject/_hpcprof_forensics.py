"""Forensics armed in a rank's Python (hpcprof.analysis.forensics reads what this writes), all in
$HPCPROF_RUN_DIR/forensics/:

- `stacks_rank{R}.txt`: a first line naming the rank's process (rank, pid, host, start time);
  Python's faulthandler writes every thread's stack there on a fatal signal (SIGSEGV, SIGFPE,
  SIGABRT, SIGBUS, SIGILL: the rank still dies of it), on SIGTERM (a launcher stopping it, the
  walltime: it then dies of it as before) and on SIGUSR1 (it goes on); each dump the job asks for
  adds a block headed with its reason, time and main thread. A file that holds
  only the first line when the program exits is removed.
- `exception_rank{R}.json`: the uncaught exception that ended the program (type, message, the
  traceback's frames, time), written after Python printed the traceback.
- `fr_rank{R}` / `fr_nccl_rank{R}`: PyTorch's Flight Recorder buffers (the one Gloo records into,
  NCCL's) as torch's `_dump_fr_trace` / `_dump_nccl_trace` give them (the pickle PyTorch's
  `fr_trace` reads), with the process groups filled in from torch.distributed where the dump's
  `pg_config` does not name its entries' groups (Gloo's, in torch 2.13), and an `hpcprof` key
  (rank, time, reason). Written once per rank: the first dump is the state at the incident.
  Without the entries' stack traces: symbolising them the first time in a process took 9-12 s
  on this 2-core machine (torch 2.13); each rank's stacks are in its stacks file instead.
- `dump.request` (a reason, then a time, a line each): written by the first rank whose program
  raises, and by the job on its walltime warning; every rank's watcher thread looks for it every HPCPROF_FORENSICS_POLL seconds (one
  stat) and then dumps its stacks and Flight Recorder. The rank whose exception wrote it waits
  HPCPROF_FORENSICS_WAIT seconds before it exits, so that the others dump before the launcher
  stops them.

Nothing here imports torch: the Flight Recorder is dumped only where the program itself imported
torch.distributed and initialised a process group.
"""

from __future__ import annotations

import atexit
import faulthandler
import json
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from typing import Any

#: what arm() set up: the forensics directory, this rank, the stacks file's descriptor, ...
_state: dict[str, Any] = {}


def arm() -> None:
    """Open the stacks file, hand it to faulthandler, hook uncaught exceptions, start the watcher."""
    rank = os.environ.get("HPCPROF_RANK", "0")
    directory = os.path.join(os.environ["HPCPROF_RUN_DIR"], "forensics")
    os.makedirs(directory, exist_ok=True)
    fd = os.open(os.path.join(directory, f"stacks_rank{rank}.txt"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    head = f"# hpcprof: rank {rank} pid {os.getpid()} host {os.uname().nodename} started {time.time():.3f}\n"
    os.write(fd, head.encode())
    poll = float(os.environ.get("HPCPROF_FORENSICS_POLL", "1"))
    _state.update(directory=directory, rank=rank, fd=fd, bare=os.fstat(fd).st_size, poll=poll,
                  wait=float(os.environ.get("HPCPROF_FORENSICS_WAIT", str(2 * poll + 0.5))),
                  request=os.path.join(directory, "dump.request"))
    if not faulthandler.is_enabled():  # PYTHONFAULTHANDLER / -X faulthandler: the user's, to stderr
        faulthandler.enable(fd, all_threads=True)
    if signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL:
        faulthandler.register(signal.SIGUSR1, fd, all_threads=True, chain=False)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:  # then dies of it as before (chain: the default action)
        faulthandler.register(signal.SIGTERM, fd, all_threads=True, chain=True)
    os.register_at_fork(after_in_child=_disarm_child)
    previous = sys.excepthook

    def excepthook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        previous(kind, value, tb)  # the traceback first, as without hpcprof
        try:
            _on_exception(kind, value, tb)
        except Exception:
            pass

    sys.excepthook = excepthook
    atexit.register(_at_exit)
    _state["seen"] = _stamp(_state["request"])
    threading.Thread(target=_watch, name="hpcprof-forensics", daemon=True).start()


def _disarm_child() -> None:
    """A forked child (a data loader worker) is not the rank: it writes nothing to the rank's files."""
    faulthandler.disable()
    faulthandler.unregister(signal.SIGUSR1)  # back to the handlers before (the defaults)
    faulthandler.unregister(signal.SIGTERM)
    sys.excepthook = sys.__excepthook__
    _state.clear()


def _at_exit() -> None:
    """Remove the stacks file when nothing but its first line was written."""
    fd = _state.get("fd")
    if fd is None:
        return
    try:
        if os.fstat(fd).st_size <= _state["bare"]:
            os.unlink(os.path.join(_state["directory"], f"stacks_rank{_state['rank']}.txt"))
    except OSError:
        pass


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size, info.st_ino


def _watch() -> None:
    """Dump on every new dump.request."""
    while True:
        time.sleep(_state["poll"])
        if not _state:
            return
        stamp = _stamp(_state["request"])
        if stamp is not None and stamp != _state.get("seen"):
            _state["seen"] = stamp
            try:
                with open(_state["request"], encoding="utf-8", errors="replace") as fh:
                    reason = fh.readline(200).strip() or "requested"
            except OSError:
                reason = "requested"
            _dump(reason)


def _dump(reason: str) -> None:
    now = time.time()
    main = threading.main_thread().ident or 0
    os.write(_state["fd"], f"# hpcprof: stacks of rank {_state['rank']} pid {os.getpid()} at {now:.3f} "
                           f"({reason}); main thread 0x{main:016x}\n".encode())
    faulthandler.dump_traceback(_state["fd"], all_threads=True)
    os.write(_state["fd"], b"\n")
    _flight_recorder(reason)


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


def _flight_recorder(reason: str) -> None:
    """Dump each Flight Recorder buffer that holds entries, once per rank."""
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
        if dump is None or os.path.exists(path):
            continue
        try:
            data = pickle.loads(dump(True, False, False))  # no stack traces: their first symbolisation takes seconds
            if not data.get("entries"):
                continue
            note: dict[str, Any] = {"rank": rank, "time_ns": time.time_ns(), "reason": reason, "pid": os.getpid()}
            named = {entry["process_group"][0] for entry in data["entries"]}
            if not named <= set(data.get("pg_config") or {}):
                note["pg_config_dumped"] = data.get("pg_config")
                data["pg_config"] = _groups()
            data["hpcprof"] = note
            _write(path, pickle.dumps(data))
        except Exception as exc:  # one buffer that cannot be dumped does not stop the other
            os.write(_state["fd"], f"# hpcprof: {function} failed: {type(exc).__name__}: {exc}\n".encode())


def _request(reason: str) -> bool:
    """Ask every rank to dump; False when a request is already there (another rank asked first)."""
    try:
        fd = os.open(_state["request"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError:
        return False
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{reason}\n{time.time():.3f}\n")
    _state["seen"] = _stamp(_state["request"])
    return True


def _on_exception(kind: type[BaseException], value: BaseException, tb: Any) -> None:
    """Record the exception, dump the Flight Recorder, ask the others to dump and give them time."""
    now = time.time()
    rank = _state["rank"]
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    frames = [[f.filename, f.lineno, f.name] for f in traceback.extract_tb(tb)][-40:]
    record = {"rank": int(rank), "pid": os.getpid(), "host": os.uname().nodename, "time": now, "type": name,
              "message": str(value)[:4000], "frames": frames}
    path = os.path.join(_state["directory"], f"exception_rank{rank}.json")
    if not os.path.exists(path):
        _write(path, json.dumps(record).encode())
    _flight_recorder(f"exception on rank {rank}")
    if _request(f"exception on rank {rank}"):
        time.sleep(_state["wait"])
