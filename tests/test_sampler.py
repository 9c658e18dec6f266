"""The stack sampler the optimizer step hook arms over the window (hpcprof/inject/_hpcprof_sampler.py):
a real program run with the hook armed as the rank wrapper arms it; its samples fall in the window's
steps and name the program's own line."""

from __future__ import annotations

import _thread
import json
import os
import subprocess
import sys
import time
import weakref
from pathlib import Path

import pytest

INJECT = Path(__file__).resolve().parents[1] / "hpcprof" / "inject"
PROGRAM = """
import time, torch
p = torch.nn.Parameter(torch.zeros(4))
opt = torch.optim.SGD([p], lr=0.1)

def work():
    end = time.perf_counter() + 0.02
    while time.perf_counter() < end:
        pass

for _ in range(12):
    work()
    p.grad = torch.ones(4)
    opt.step()
"""


def run(tmp_path: Path, sample_ms: str) -> Path:
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCPROF_")} | {
        "PYTHONPATH": str(INJECT), "HPCPROF_STEPS": "1", "HPCPROF_RUN_DIR": str(tmp_path), "HPCPROF_RANK": "0",
        "HPCPROF_STEPS_SKIP": "3", "HPCPROF_STEPS_COUNT": "6", "HPCPROF_SAMPLE_MS": sample_ms,
        "OMP_NUM_THREADS": "1"}  # no OpenMP workers spinning on the 2 CPUs the sampler needs one of
    done = subprocess.run([sys.executable, str(program)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "hpcprof:" not in done.stderr, done.stderr
    return tmp_path / "samples" / "rank0.jsonl"


@pytest.mark.slow
def test_samples_cover_the_window_and_name_the_line(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    samples = [json.loads(line) for line in run(tmp_path, "5").read_text().splitlines()]
    steps = [json.loads(line) for line in (tmp_path / "steps" / "rank0.jsonl").read_text().splitlines()[1:]]
    ends = {s["step"]: s["end_ns"] for s in steps}
    times = [s["t_ns"] for s in samples if "t_ns" in s]
    assert ends[3] <= min(times) and max(times) <= ends[9]           # only the window: steps 4-9
    # 6 steps of 20 ms sampled every 5 ms at most; a sample waits for the GIL (a pure-Python loop
    # hands it over after the switch interval, 5 ms), on a loaded machine longer
    assert 3 <= len(times) <= 6 * 20 / 5 + 2
    work = [s for s in samples if s.get("at", "").startswith(f"{tmp_path / 'prog.py'}:8:work")]
    assert len(work) >= len(times) / 2, samples                       # the busy line, most of the time
    assert all(s["at"].split(";")[1].startswith(f"{tmp_path / 'prog.py'}:12:<module>") for s in work)


@pytest.mark.slow
def test_sample_ms_0_turns_it_off(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    assert not run(tmp_path, "0").exists()
    assert len((tmp_path / "steps" / "rank0.jsonl").read_text().splitlines()) == 13


def test_a_sampled_frame_does_not_keep_the_program_s_objects_alive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A frame object outlives its function while referenced, and keeps its locals: a sampler that
    held the last sampled frame through its sleep kept the program's tensors alive up to an interval
    longer (a higher peak memory in the window)."""
    monkeypatch.syspath_prepend(str(INJECT))
    import _hpcprof_sampler

    class Activation:
        pass

    sampler = _hpcprof_sampler._Sampler(str(tmp_path / "samples.jsonl"), 0.05)

    def work() -> weakref.ref[Activation]:
        activation = Activation()
        end = time.monotonic() + 0.15       # sampled about every 50 ms, the last time before it returns
        while time.monotonic() < end:
            pass
        return weakref.ref(activation)

    _thread.start_new_thread(sampler.loop, ())
    try:
        kept = work()
        alive = kept() is not None
    finally:
        sampler.running = False
    assert any(":work" in at for _, at, _ in sampler.samples), sampler.samples
    assert not alive


@pytest.mark.slow
@pytest.mark.parametrize(("closure", "expected"), [(True, ""), (False, "optimizer")])
def test_a_closure_run_by_the_optimizer_is_the_program_s_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, closure: bool, expected: str) -> None:
    """Lightning runs forward and backward inside optimizer.step(closure): a sample there is the
    program's, not the optimizer's; a sample inside an optimizer's own step (here a user's
    optimizer, called by torch.optim's step wrapper) is the optimizer's."""
    torch = pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(INJECT))
    import _hpcprof_sampler

    sampler = _hpcprof_sampler._Sampler(str(tmp_path / "samples.jsonl"), 1.0)
    weight = torch.nn.Parameter(torch.zeros(2))

    def training_step() -> torch.Tensor:
        sampler.sample(sys._getframe())
        return (weight * 2).sum()

    class UserOptimizer(torch.optim.SGD):
        def step(self, closure=None):  # type: ignore[no-untyped-def, override]
            sampler.sample(sys._getframe())
            return super().step(closure)

    if closure:
        torch.optim.SGD([weight], lr=0.1).step(lambda: training_step())
    else:
        UserOptimizer([weight], lr=0.1).step()
    _, at, kind = sampler.samples[0]
    assert kind == expected, sampler.samples
    assert at.split(";")[0].endswith(":training_step" if closure else ":step")
