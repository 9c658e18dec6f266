"""Samples of the main thread's Python stack during the window's steps, for the idle attribution
(hpcprof.analysis.idle names the line of the user's program behind each cause of idle).

Armed by the optimizer step hook (_hpcprof_steps) at the end of the window's first step and
stopped at the end of its last, never in the job's unprofiled reference run: a `_thread` thread
wakes every HPCPROF_SAMPLE_MS ms (profile.window.stack_sample_ms, default 5; 0 turns it off), reads the main thread's frame (sys._current_frames) and keeps, per sample, the
wall-clock ns, the innermost frame of the user's program (not the standard library, not an
installed package, not this hook) and the two user frames that called it, innermost first,
as "file:line:function;file:line:function;...", and what the stack runs
(`input`: torch.utils.data; `collective`: torch.distributed; `compile`: torch._dynamo/_inductor;
`optimizer`: torch.optim; `backward`: torch.autograd; else empty). An optimizer's step that runs
the program's closure (Lightning's forward and backward run inside optimizer.step) is not the
optimizer's: torch.optim counts only where no frame of the program runs inside it but the program's
own `step` (an optimizer written by the user). Garbage collections of the
window are kept too (gc.callbacks: their start and end). At the window's end the samples are
written, one append each line, to $HPCPROF_RUN_DIR/samples/rank{R}.jsonl:
{"t_ns", "at", "in"} per sample, {"gc_ns": [start, end]} per collection.

Standard library only; a failure is one line on stderr and the program runs on.
"""

from __future__ import annotations

import _thread
import gc
import os
import sys
import time
from typing import Any

from _hpcprof_files import say, subdirectory

#: path parts of the library frames the sampler looks past, to the user's own frame
_LIBRARY = ("site-packages", "dist-packages", os.path.dirname(os.__file__), os.path.dirname(os.path.abspath(__file__)))
#: (path part, what a stack running it does), the first found from the innermost frame out wins
_KINDS = (("torch/utils/data/", "input"), ("torch/distributed/", "collective"), ("torch/_dynamo/", "compile"),
          ("torch/_inductor/", "compile"), ("torch/optim/", "optimizer"), ("torch/autograd/", "backward"))


#: the user's frames kept per sample, innermost first
USER_FRAMES = 3


class _Sampler:
    def __init__(self, path: str, interval_s: float) -> None:
        self.path = path
        self.interval_s = interval_s
        self.main = _thread.get_ident()
        self.running = True
        self.samples: list[tuple[int, str, str]] = []
        self.collections: list[tuple[int, int]] = []
        self.gc_start = 0
        self.where: dict[Any, tuple[bool, str]] = {}   # code object -> (a user's frame, kind)

    def loop(self) -> None:
        try:
            while self.running:
                time.sleep(self.interval_s)
                frame = sys._current_frames().get(self.main)
                if frame is not None and self.running:
                    self.sample(frame)
                frame = None    # a frame held past its return would keep its locals (the program's tensors) alive
        except Exception as exc:
            self.running = False
            say(f"hpcprof: stack sampler stopped ({type(exc).__name__}: {exc})")

    def sample(self, frame: Any) -> None:
        now = time.time_ns()
        chain: list[str] = []
        kind = ""
        user_seen = user_step = False
        while frame is not None:
            code = frame.f_code
            known = self.where.get(code)
            if known is None:
                name = code.co_filename.replace(os.sep, "/")
                user = not name.startswith("<") and not any(part in name for part in _LIBRARY)
                known = self.where[code] = (user, next((k for part, k in _KINDS if part in name), ""))
            if known[0]:
                user_seen, user_step = True, user_step or code.co_name == "step"
                if len(chain) < USER_FRAMES:
                    chain.append(f"{code.co_filename}:{frame.f_lineno}:{code.co_name}")
            if known[1] and not kind and (known[1] != "optimizer" or not user_seen or user_step):
                kind = known[1]
            if len(chain) == USER_FRAMES and kind:
                break
            frame = frame.f_back
        self.samples.append((now, ";".join(chain), kind))

    def on_gc(self, phase: str, info: Any) -> None:
        if phase == "start":
            self.gc_start = time.time_ns()
        elif self.gc_start:
            self.collections.append((self.gc_start, time.time_ns()))
            self.gc_start = 0

    def write(self) -> None:
        import json

        lines = [json.dumps({"t_ns": t, "at": at, "in": kind}) for t, at, kind in self.samples]
        lines += [json.dumps({"gc_ns": [start, end]}) for start, end in self.collections]
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            for line in lines:
                os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)


_sampler: _Sampler | None = None


def window(opening: bool, rank: str) -> None:
    """Start sampling (`opening`) or stop and write the samples; called by the step hook at the window's edges."""
    global _sampler
    try:
        if opening:
            interval_ms = float(os.environ.get("HPCPROF_SAMPLE_MS", "5"))
            if interval_ms <= 0 or _sampler is not None:
                return
            directory = subdirectory(os.environ["HPCPROF_RUN_DIR"], "samples")   # never the run directory itself
            _sampler = _Sampler(os.path.join(directory, f"rank{rank}.jsonl"), interval_ms / 1000)
            gc.callbacks.append(_sampler.on_gc)
            _thread.start_new_thread(_sampler.loop, ())
        elif _sampler is not None and _sampler.running:
            _sampler.running = False
            gc.callbacks.remove(_sampler.on_gc)
            _sampler.write()
    except Exception as exc:
        say(f"hpcprof: stack sampler not armed ({type(exc).__name__}: {exc})")
