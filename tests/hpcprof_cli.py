"""The one way the tests run the real command line: `python -m hpcprof ARGS`, each call its own process.

By default that process is forked from a server, one per test process, that has imported the heavy
third-party libraries the commands use (PRELOAD: pandas, SQLAlchemy, pyarrow, ...), so that each call
does not import them again: about 1 s of CPU a call on the 2-core CI machine, where the suite is
CPU-bound. The server also imports hpcprof's own modules but the workloads' (which import torch)
and the ranks' start-up hook: a forked call whose sys.path finds another hpcprof first (a PYTHONPATH
folder or its working directory holding one) drops them and imports that one afresh. Their modules
hold no state from the environment at import, and a call's own state (the plug-ins' entry points,
caches) is made in the call. Everything else starts afresh in the forked process as `python -m
hpcprof` starts it: the environment, the working directory, sys.argv and sys.path[0], stdin from
/dev/null, stdout and stderr captured; it ends in the interpreter's own exit (an uncaught exception's
traceback, atexit handlers, non-daemon threads). A new interpreter is started instead where that
difference could matter: `fresh=True`, an environment that changes how an interpreter starts
(STARTUP_VARIABLES), or HPCPROF_TEST_FORK=0 for every call.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

#: imported once by the server (what the commands import lazily, heaviest first)
PRELOAD = ("pandas", "numpy", "pyarrow", "pyarrow.compute", "pyarrow.parquet", "sqlalchemy",
           "sqlalchemy.dialects.sqlite", "sqlalchemy.dialects.postgresql", "adbc_driver_sqlite.dbapi", "yaml",
           "jinja2", "click", "msgspec", "rich.console", "rich.table")
#: variables read as an interpreter starts or loads its libraries: a call whose environment differs in
#: one of them from the server's gets a new interpreter
STARTUP_VARIABLES = ("PYTHON", "LD_", "LANG", "LC_", "OMP_", "OPENBLAS_", "MKL_", "MALLOC")
#: ... except PYTHONPATH, which the forked process puts on sys.path as an interpreter does (unless one of
#: its folders holds a module that an interpreter imports as it starts)
STARTUP_MODULES = ("sitecustomize.py", "sitecustomize", "usercustomize.py", "usercustomize")

#: the server: preloads, then per connection (a JSON request and the stdout/stderr descriptors) forks
#: the command, sends its pid, and when it ends its exit status (subprocess's returncode)
SERVER = r"""
import json, os, select, signal, socket, sys
for name in sys.argv[2].split(","):
    try:
        __import__(name)
    except Exception:
        pass
own = None                                      # the folder holding the hpcprof preloaded here
try:
    import importlib, pkgutil
    import hpcprof
    own = os.path.dirname(os.path.dirname(os.path.realpath(hpcprof.__file__)))
    for info in pkgutil.walk_packages(hpcprof.__path__, "hpcprof.", onerror=lambda name: None):
        if not info.name.startswith(("hpcprof.workloads.", "hpcprof.inject.", "hpcprof.__main__")):
            try:
                importlib.import_module(info.name)
            except Exception:
                pass
except Exception:
    pass
path = sys.argv[1]
own_path = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
listener.bind(path + ".tmp")
listener.listen(64)
os.rename(path + ".tmp", path)
wake_r, wake_w = os.pipe()
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
signal.signal(signal.SIGCHLD, lambda *_: None)
pending = {}
child = None
while child is None:
    ready = select.select([listener, sys.stdin, wake_r], [], [])[0]
    if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1):
        break                                   # the test process ended
    if wake_r in ready:
        os.read(wake_r, 512)
        while pending:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = pending.pop(pid, None)
            if conn is not None:
                conn.send(str(os.waitstatus_to_exitcode(status)).encode())
                conn.close()
    if listener in ready:
        conn = listener.accept()[0]
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 2)
        pid = os.fork()
        if pid == 0:
            child = (json.loads(message), fds)
            for sock in (listener, conn, *pending.values()):
                sock.close()
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.close(wake_r)
            os.close(wake_w)
        else:
            for fd in fds:
                os.close(fd)
            conn.send(str(pid).encode())
            pending[pid] = conn
if child is not None:
    request, (out, err) = child
    null = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    import time
    time.tzset()
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    sys.path[0] = os.getcwd()
    if request["pythonpath"] is not None:
        sys.path[1:] = [*request["pythonpath"], *(p for p in sys.path[1:] if p not in own_path)]
    found = next((os.path.realpath(p) for p in sys.path if os.path.isfile(os.path.join(p, "hpcprof", "__init__.py"))),
                 None)
    if found != own:                            # this call imports another hpcprof: all of it afresh
        for name in [m for m in sys.modules if m == "hpcprof" or m.startswith("hpcprof.")]:
            del sys.modules[name]
    sys.argv = ["-m", *request["args"]]
    import runpy
    runpy.run_module("hpcprof", run_name="__main__", alter_sys=True)
"""

_server: tuple[subprocess.Popen[bytes], str, dict[str, str]] | None = None
_starting = threading.Lock()


def _start_server() -> tuple[subprocess.Popen[bytes], str, dict[str, str]]:
    """This process's server (started on first use; it ends when this process does)."""
    global _server
    with _starting:
        if _server is None or _server[0].poll() is not None:
            _server = _new_server()
        return _server


def _new_server() -> tuple[subprocess.Popen[bytes], str, dict[str, str]]:
    folder = tempfile.mkdtemp(prefix="hpcprof-cli-")
    path = os.path.join(folder, "server")
    env = dict(os.environ)
    with open(os.path.join(folder, "server.log"), "wb") as log:
        proc = subprocess.Popen([sys.executable, "-c", SERVER, path, ",".join(PRELOAD)], stdin=subprocess.PIPE,
                                stdout=log, stderr=log, cwd=folder, env=env)
    deadline = time.monotonic() + 120
    while not os.path.exists(path):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the CLI server did not start: {Path(folder, 'server.log').read_text()[-2000:]}")
        time.sleep(0.02)
    atexit.register(_stop, proc)
    return proc, path, env


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End the server (its stdin closed) and wait for it, so that its CPU is counted as this process's."""
    assert proc.stdin is not None
    proc.stdin.close()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _starts_differently(env: Mapping[str, str], server_env: Mapping[str, str]) -> bool:
    keys = {k for k in (*env, *server_env) if k.startswith(STARTUP_VARIABLES) and k != "PYTHONPATH"}
    return any(env.get(k) != server_env.get(k) for k in keys)


def _python_path(env: Mapping[str, str], server_env: Mapping[str, str], cwd: str) -> list[str] | None:
    """The call's PYTHONPATH folders, absolute as sys.path holds them, where it differs from the
    server's, else None. LookupError where one holds a start-up module (a new interpreter is needed)."""
    if env.get("PYTHONPATH") == server_env.get("PYTHONPATH"):
        return None
    folders = [os.path.join(cwd, p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if any(os.path.exists(os.path.join(f, m)) for f in folders for m in STARTUP_MODULES):
        raise LookupError("a start-up module")
    return [os.path.abspath(f) for f in folders]


def _text(data: bytes) -> str:
    """As subprocess's text mode decodes: the locale's encoding, universal newlines."""
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")


def _forked(argv: list[str], args: tuple[str, ...], cwd: str, env: dict[str, str],
            timeout: float) -> subprocess.CompletedProcess[str] | None:
    """Run the command forked from the server; None where the server is not to be used."""
    _, path, server_env = _start_server()
    if _starts_differently(env, server_env):
        return None
    try:
        python_path = _python_path(env, server_env, cwd)
    except LookupError:
        return None
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
        conn.connect(path)
        socket.send_fds(conn, [json.dumps({"args": args, "cwd": cwd, "env": env, "pythonpath": python_path}).encode()],
                        [out.fileno(), err.fileno()])
        pid = int(conn.recv(64))
        conn.settimeout(timeout)
        try:
            code = int(conn.recv(64))
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            conn.settimeout(None)
            conn.recv(64)
            out.seek(0)
            err.seek(0)
            raise subprocess.TimeoutExpired(argv, timeout, output=_text(out.read()), stderr=_text(err.read())) from None
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(argv, code, _text(out.read()), _text(err.read()))


def hpcprof(*args: str, cwd: Path | None = None, workdir: Path | None = None,
            env: Mapping[str, str | None] | None = None, timeout: float = 300,
            check: bool = False, fresh: bool = False) -> subprocess.CompletedProcess[str]:
    """Run `python -m hpcprof ARGS` (with `--workdir WORKDIR` appended when `workdir` is given) in
    `cwd` (default: the workdir's parent, else the current directory). `env` is laid over this
    process's environment (a None value removes the variable). `check`: an exit status other than 0
    fails the test with the command's output. `fresh`: a new interpreter (the module docstring)."""
    merged = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    full = (*args, *(["--workdir", str(workdir)] if workdir is not None else []))
    argv = [sys.executable, "-m", "hpcprof", *full]
    where = cwd if cwd is not None else workdir.parent if workdir is not None else None
    result = None
    if not fresh and os.environ.get("HPCPROF_TEST_FORK", "1") != "0":
        result = _forked(argv, full, os.path.abspath(where or os.getcwd()), merged, timeout)
    if result is None:
        result = subprocess.run(argv, cwd=where, capture_output=True, text=True, timeout=timeout, env=merged, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"hpcprof {' '.join(args)} -> {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result
