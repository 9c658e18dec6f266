"""Optimizer steps marked in a rank's Python, without a change to the program (hpcprof.inject;
`hpcprof collect` reads what this writes: hpcprof.analysis.steps).

Armed where the rank wrapper sets HPCPROF_STEPS=1 (a `command` workload with
`profile.window.auto`), in every Python of the rank; nothing happens until the program imports
torch. When `torch.optim.optimizer` has been imported (it is part of `import torch`), PyTorch's
global optimizer step post hook is registered (register_optimizer_step_post_hook, torch >= 2.0;
a pre hook would add a call per step and tell nothing the post hook's caller does not). From
then on:

- A step is one optimizer step: it ends when the step of the lead optimizer returns and begins
  where the previous one ended, so it spans the iteration (data, forward, backward, optimizer).
  With gradient accumulation that is one optimizer step per several micro-batches. The lead
  optimizer is the first whose step returns; with several optimizers stepping in one iteration
  (a GAN's generator and discriminator) the others' steps fall inside the lead's steps; an
  optimizer that steps twice while the lead does not becomes the lead (a second training
  phase with a new optimizer). A step taken inside another optimizer's step (ZeRO's wrapped
  optimizer, a subclass whose step calls its parent's hooked step) is part of the outer one: the
  hook looks up the Python stack for another optimizer step running, so a step that raised leaves
  nothing behind. An optimizer step that a GradScaler skips is no step.
- The first process of the rank whose optimizer steps records them in
  $HPCPROF_RUN_DIR/steps/rank{R}.jsonl, one line per step written with one append each (a line
  is whole or absent): a header {"rank", "pid", "host", "tool", "skip", "steps", "profiled"} then
  {"step": N, "end_ns": wall-clock ns at its end, "ns": its length (null for the first step,
  whose start is not seen)}. `profiled` is [first, last]: the steps the hook's torch.profiler may
  slow: its warm-up step to two steps after it stopped (the first holds the trace's export, the
  second the wait for the other ranks' exports); the others (but the first) are the process's
  unprofiled steps. Under `tool: none` with the memory history (HPCPROF_MEMORY_HISTORY), the
  window's steps and the next, which holds the snapshot's dump. Null where every step may be slowed
  (nsys and ncu inject into the whole process) or none is (`tool: none`). Other processes of the rank (forked workers, a second program that
  steps) record nothing.
- Each step after the first is an NVTX range (torch.cuda.nvtx start/end ranges, which any
  nesting of the program's own push/pop ranges leaves intact): `hpcprof:step` for the steps of
  the window, steps skip+1 .. skip+count (HPCPROF_STEPS_SKIP, HPCPROF_STEPS_COUNT), and
  `hpcprof:step-unmeasured` for the others. Only where torch has NVTX (a CUDA build).
- Where the hook opens the window (HPCPROF_STEPS_DRIVE=1, not `opened_by_program`), on a profiled
  rank: with HPCPROF_STEPS_CAPTURE=1 (nsys `capture_range: cudaProfilerApi`, ncu
  `profile_from_start: false`), cudaProfilerStart at the end of step skip and, after the GPU
  finished, cudaProfilerStop at the end of step skip+count; under `profile.tool: torch`, a
  torch.profiler started at the end of step skip-warmup whose schedule makes steps skip+1 ..
  skip+count+1 its active `ProfilerStep`s (one more than the window: a trace reader drops the
  last, possibly truncated, step as HTA does), its warm-up taken from the skipped steps
  (HPCPROF_TORCH_SCHEDULE's warmup), its trace written to
  $HPCPROF_PROFILE_DIR/rank{R}.pt.trace.json[.gz] and the profiler stopped after it. A program
  whose own profiler records when the hook's would start, or starts during the hook's warm-up,
  keeps it: the hook's profiler steps aside with one line (one started while the hook's records
  is not seen).

In the unprofiled reference run of the job (HPCPROF_STEPS_REFERENCE=1, profile.reference), the
steps go to $HPCPROF_RUN_DIR/steps/reference/rank{R}.jsonl and the process ends (exit status 0,
its output flushed) when step skip+count has been recorded: the reference costs its start-up and
the steps up to the window's end. Nothing observes it: no profiler, no stack sampler.

The hooks read the clock, write a line and call NVTX: they change nothing the program computes
(benchmarks/step_hook.py measures their cost). A bad setting or a failure is one line on stderr
(where the program has one) and the hooks step aside; the program runs on. The steps file is
written through a high descriptor checked before each line (a program that closed it keeps its own
files), and only its `steps/` directory is ever made (a removed run directory stays removed).
Standard library only; torch is used only once the program imported it.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import sys
import time
import weakref
from typing import Any

import _hpcprof_memory
from _hpcprof_files import Identity, open_high, ours, say, subdirectory, whole
from _hpcprof_files import rank as rank_setting

#: the NVTX range of a step in the window, and of any other step (hpcprof.config.profile names them too)
STEP_RANGE = "hpcprof:step"
UNMEASURED_RANGE = "hpcprof:step-unmeasured"
#: the module whose import arms the hooks
WATCHED = "torch.optim.optimizer"


class _State:
    """What this process knows: its configuration (from the environment) and where the steps are."""

    def __init__(self) -> None:
        env = os.environ
        self.rank = rank_setting()
        self.skip = whole("HPCPROF_STEPS_SKIP", "5", 0, 10**9)
        self.count = whole("HPCPROF_STEPS_COUNT", "10", 1, 10**9)
        self.tool = env.get("HPCPROF_PROFILE_TOOL", "none")
        drive = env.get("HPCPROF_STEPS_DRIVE") == "1" and self.tool != "none"
        self.capture = drive and env.get("HPCPROF_STEPS_CAPTURE") == "1"
        self.torch_profile = drive and self.tool == "torch"
        self.run_dir = env["HPCPROF_RUN_DIR"]
        self.reference = env.get("HPCPROF_STEPS_REFERENCE") == "1"   # the job's unprofiled reference run
        # the memory history's entries (profile.memory); nothing observes the reference run
        self.history = 0 if self.reference else whole("HPCPROF_MEMORY_HISTORY", "0", 0, 10**9)
        self.path = os.path.join(self.run_dir, "steps", *(("reference",) if self.reference else ()),
                                 f"rank{self.rank}.jsonl")
        self.warmup = 0
        if self.torch_profile:
            try:
                self.warmup = _warmup(self)
            except ValueError as exc:
                say(f"hpcprof: {exc}: the step hook starts no torch.profiler")
                self.torch_profile = False
        self.off = False                # a failure, another process records, or a forked child
        self.fd: int | None = None      # the steps file, once claimed
        self.identity: Identity | None = None
        self.step = 0
        self.last_ns = 0                # perf_counter_ns at the end of the previous step
        self.lead: weakref.ref[Any] | None = None
        self.others: set[int] = set()   # other optimizers that stepped since the lead's last step
        self.nvtx: Any = None           # torch.cuda.nvtx where it works
        self.range: int | None = None   # the open NVTX range of the running step
        self.capturing = False
        self.profiler: Any = None


_state: _State | None = None


def arm() -> None:
    """Register the hooks now if torch.optim is imported, else when it is (once per process)."""
    global _state
    if _state is not None:
        return
    try:
        _state = _State()
        module = sys.modules.get(WATCHED)
        if module is not None:
            _register(module)
        else:
            sys.meta_path.insert(0, _Finder())
        os.register_at_fork(after_in_child=_fork_child)
    except Exception as exc:
        _fail("not armed", exc)


class _Finder:
    """A meta path finder that only watches: it finds `torch.optim.optimizer` through the finders
    after it and runs _register once the module has executed (the module and its loader stay
    the ones Python would have used). It leaves sys.meta_path on its first use."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != WATCHED:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            _fail("not armed", RuntimeError(f"{name} has no loader to watch"))
            return spec
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            try:
                run(module)
            finally:
                try:
                    del loader.exec_module      # the loader's own method again
                except AttributeError:
                    pass
            _register(module)

        loader.exec_module = exec_module
        return spec


def _register(module: Any) -> None:
    register = getattr(module, "register_optimizer_step_post_hook", None)
    if register is None:
        _fail("not armed", RuntimeError("this torch has no global optimizer step hooks (torch >= 2.0 has)"))
        return
    register(_post_hook)


def _fail(what: str, exc: BaseException) -> None:
    if _state is not None:
        _state.off = True
    say(f"hpcprof: optimizer step hook {what} ({type(exc).__name__}: {exc})")


def _fork_child() -> None:
    """A forked child (a data loader worker) is not the process that records the rank's steps."""
    if _state is not None:
        _state.off = True
        _state.fd = None


def _nested() -> bool:
    """Whether the optimizer step that called the post hook runs inside another one: the hook's
    caller (torch's step wrapper) appears again further up the stack."""
    caller = sys._getframe(2)
    code = caller.f_code
    frame = caller.f_back
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def _post_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
    state = _state
    if state is None or state.off:
        return
    now = time.perf_counter_ns()
    if _nested():               # inside another optimizer's step: part of that one
        return
    key = id(optimizer)
    lead = state.lead() if state.lead is not None else None
    if lead is not None and lead is not optimizer:
        if key not in state.others:
            state.others.add(key)
            return
        lead = None             # it stepped twice while the lead did not: it leads now
    if lead is None:
        state.lead = weakref.ref(optimizer)
    state.others.clear()
    try:
        _step_ended(state, now)
    except Exception as exc:
        _fail("stopped", exc)
        _close(state)


def _step_ended(state: _State, now: int) -> None:
    """Record step N (N = state.step + 1) ending at `now`, move the window, open the next step's range."""
    if state.step == 0 and not _claim(state):
        return
    state.step += 1
    step = state.step
    if state.range is not None:
        state.nvtx.range_end(state.range)
        state.range = None
    length = "null" if step == 1 else str(now - state.last_ns)
    memory = _hpcprof_memory.step_peaks()
    _append(state, f'{{"step":{step},"end_ns":{time.time_ns()},"ns":{length}{memory}}}\n')
    last = state.skip + state.count
    _hpcprof_memory.history(step, state.skip, last, state.history, state.rank)
    if step in (state.skip, last) and not state.reference:  # the window's edges: the stack sampler's too
        import _hpcprof_sampler

        _hpcprof_sampler.window(step == state.skip, state.rank)
    if state.profiler is not None:
        if _foreign_profiler(state.profiler):
            state.profiler = None       # the program's now: neither stepped nor stopped by the hook
            _leave_profiler()
        else:
            state.profiler.step()
            if step > last:             # the trace of steps skip+1 .. last+1 is written
                state.profiler.stop()
                state.profiler = None
    elif state.torch_profile and step == max(1, state.skip - state.warmup):
        state.torch_profile = False
        if _profiling():
            _leave_profiler()
        else:
            state.profiler = _torch_profiler(state)
            state.profiler.start()
    if state.capture:
        if step == state.skip and _cuda_in_use():
            import torch

            torch.cuda.profiler.start()
            state.capturing = True
        elif step == last and state.capturing:
            import torch

            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            state.capturing = False
    if state.reference and step >= last:
        _close(state)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)     # the reference's window is recorded: the rest of the program is not needed
    if state.nvtx is not None:
        name = STEP_RANGE if state.skip <= step < last else UNMEASURED_RANGE
        state.range = state.nvtx.range_start(name)
    state.last_ns = now


def _claim(state: _State) -> bool:
    """Open the rank's steps file, first process only; find NVTX. False: another process records."""
    steps = subdirectory(state.run_dir, "steps")
    if state.reference:
        subdirectory(steps, "reference")
    try:
        state.fd, state.identity = open_high(state.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        state.off = True
        say(f"hpcprof: optimizer steps of pid {os.getpid()} not recorded: {state.path} is another "
            "process's of this rank")
        return False
    device = _hpcprof_memory.header()     # {} where CUDA is not in use: no memory history either
    profiled = [state.skip - state.warmup + 1, state.skip + state.count + 3] if state.torch_profile else \
        [state.skip + 1, state.skip + state.count + 1] if state.tool == "none" and device and state.history else None
    header = {"rank": int(state.rank), "pid": os.getpid(), "host": os.uname().nodename, "tool": state.tool,
              "skip": state.skip, "steps": state.count, "profiled": profiled, **device}
    _append(state, _json(header) + "\n")
    import torch

    state.nvtx = torch.cuda.nvtx if hasattr(torch._C, "_nvtx") else None   # a CPU build has no NVTX
    atexit.register(_close, state)
    return True


def _append(state: _State, line: str) -> None:
    """One line onto the steps file; a descriptor the program closed (or reused for a file of its
    own) is left to it, and the file opened again by its path (never made anew)."""
    if not ours(state.fd, state.identity):
        state.fd, state.identity = open_high(state.path, os.O_WRONLY | os.O_APPEND)
    assert state.fd is not None
    os.write(state.fd, line.encode())


def _json(values: dict[str, Any]) -> str:
    import json

    return json.dumps(values, separators=(",", ":"))


def _profiling() -> bool:
    """A torch.profiler (or autograd profiler) is recording already: the program's own."""
    import torch

    return bool(torch._C._autograd._profiler_enabled())


def _foreign_profiler(profiler: Any) -> bool:
    """The hook's profiler is in its warm-up (prepared, not recording) yet a profiler records: the
    program started its own, which the hook's would stop under it."""
    import torch

    return profiler.current_action == torch.profiler.ProfilerAction.WARMUP and _profiling()


def _leave_profiler() -> None:
    say("hpcprof: the program runs its own torch.profiler: the step hook leaves it the window "
        "(set profile.window.opened_by_program: true)")


def _warmup(state: _State) -> int:
    """The torch.profiler's warm-up steps: HPCPROF_TORCH_SCHEDULE's, within the skipped steps."""
    schedule = dict(item.split("=", 1) for item in os.environ.get("HPCPROF_TORCH_SCHEDULE", "").split(",") if "=" in item)
    text = schedule.get("warmup", "1")
    if not (text.isascii() and text.isdigit() and len(text) <= 9):
        raise ValueError(f"HPCPROF_TORCH_SCHEDULE's warmup={text[:40]!r} is not a whole number")
    return max(0, min(int(text), state.skip - 1))


def _cuda_in_use() -> bool:
    """The program initialised CUDA (the capture range is a CUDA call; none is made for a CPU program)."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_initialized()


def _torch_profiler(state: _State) -> Any:
    """torch.profiler over steps skip+1 .. skip+count+1, started at the end of step skip-warmup, its
    warm-up's first step ProfilerStep#0 (see the module)."""
    import torch

    warmup = state.warmup
    gzip = os.environ.get("HPCPROF_TORCH_GZIP") == "1"
    directory = os.environ.get("HPCPROF_PROFILE_DIR") or os.path.join(state.run_dir, "profiles", "torch")
    path = os.path.join(directory, f"rank{state.rank}.pt.trace.json" + (".gz" if gzip else ""))

    def write(profile: Any) -> None:
        if not os.path.isdir(directory):    # the wrapper makes it; a removed one stays removed
            raise FileNotFoundError(f"{directory} is gone")
        profile.export_chrome_trace(path)

    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return torch.profiler.profile(
        activities=activities, record_shapes=os.environ.get("HPCPROF_TORCH_SHAPES") == "1",
        with_stack=os.environ.get("HPCPROF_TORCH_STACK") == "1",
        profile_memory=os.environ.get("HPCPROF_TORCH_MEMORY") == "1", on_trace_ready=write,
        schedule=torch.profiler.schedule(wait=0, warmup=warmup, active=state.count + 1, repeat=1))


def _close(state: _State) -> None:
    """At exit, or after a failure: end the open range and what the hook opened (a torch.profiler
    still recording writes its trace)."""
    try:
        if state.range is not None and state.nvtx is not None:
            state.nvtx.range_end(state.range)
        if state.profiler is not None:
            state.profiler.stop()
        if state.capturing:
            import torch

            torch.cuda.profiler.stop()
    except Exception:
        pass
    state.range, state.profiler, state.capturing = None, None, False
