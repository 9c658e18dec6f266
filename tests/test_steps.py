"""The optimizer step hook (hpcprof/inject/_hpcprof_steps.py, profile.window.auto): what it records
in a Python of its own (several optimizers, nesting, a new optimizer, a step that raises, a forked
child, a second process of the rank, the program's results unchanged), the experiment options it
reads, and real jobs on the local site (2 ranks, gloo, env://) with an unmodified trainer: a plain
loop, gradient accumulation, a program without an optimizer, torch.profiler driven by the steps,
and the profiler's overhead against a `tool: none` run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hpcprof_cli import hpcprof
from reliability_util import one_line_error

from hpcprof.analysis.steps import steps_tables
from hpcprof.config.profile import STEP_RANGE, UNMEASURED_STEP_RANGE
from hpcprof.core import catalog as c
from hpcprof.profilers import catalogs
from hpcprof.run.results import list_tables, read_headline, read_table

REPO = Path(__file__).resolve().parents[1]
INJECT = REPO / "hpcprof" / "inject"
TRAINER = Path(__file__).parent / "data" / "steps_train.py"


def hook_env(run: Path, **extra: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(INJECT), "HPCPROF_RUN_DIR": str(run), "HPCPROF_RANK": "0",
            "HPCPROF_STEPS": "1", "HPCPROF_STEPS_SKIP": "2", "HPCPROF_STEPS_COUNT": "3", "OMP_NUM_THREADS": "1",
            **extra}


def run_python(run: Path, code: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], env=hook_env(run, **extra), capture_output=True, text=True,
                          timeout=120, check=True)


def recorded(run: Path, rank: int = 0) -> list[dict[str, Any]]:
    lines = (run / "steps" / f"rank{rank}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


LOOP = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(7):
    model(torch.ones(4, 8)).pow(2).sum().backward()
    opt.step()
    opt.zero_grad()
print(repr(model.weight.sum().item()))
"""


@pytest.mark.slow     # two torch processes (hooked, plain)
def test_each_optimizer_step_is_recorded_and_the_result_is_unchanged(tmp_path: Path) -> None:
    hooked = run_python(tmp_path, LOOP)
    plain = subprocess.run([sys.executable, "-c", LOOP], capture_output=True, text=True, check=True)
    assert hooked.stdout == plain.stdout and hooked.stderr == ""      # the same bits, nothing said
    head, *steps = recorded(tmp_path)
    assert (head["rank"], head["skip"], head["steps"], head["tool"]) == (0, 2, 3, "none")
    assert [s["step"] for s in steps] == list(range(1, 8))
    assert steps[0]["ns"] is None and all(s["ns"] > 0 for s in steps[1:])
    assert [s["end_ns"] for s in steps] == sorted(s["end_ns"] for s in steps)
    df = steps_tables(tmp_path)[0]["times"]
    assert df["in_window"].tolist() == [False, False, True, True, True, False, False]   # steps 3..5


@pytest.mark.slow
def test_what_a_step_is_with_several_optimizers(tmp_path: Path) -> None:
    """A GAN's two optimizers: one step per iteration. An optimizer stepping another (ZeRO-like): one.
    A second phase with a new optimizer: its steps count. A step that raised and was caught: the next
    ones count. The steps' count is the program's own each time."""
    code = """
import torch
p, q = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
d, g = torch.optim.SGD([p], lr=0.1), torch.optim.Adam([q])

class Outer(torch.optim.SGD):
    def __init__(self, inner):
        super().__init__([torch.nn.Parameter(torch.ones(1))], lr=0.1)
        self.inner = inner
    def step(self, closure=None):
        self.inner.step()
        return super().step(closure)

iterations = 0
for _ in range(4):                       # GAN: discriminator, then generator
    (p.sum() + q.sum()).backward()
    d.step(); g.step(); iterations += 1
outer = Outer(torch.optim.SGD([torch.nn.Parameter(torch.ones(3))], lr=0.1))
for _ in range(3):                       # a new phase: an optimizer that steps another
    outer.step(); iterations += 1

class Failing(torch.optim.SGD):
    def step(self, closure=None):
        raise RuntimeError("no")

failing = Failing([torch.nn.Parameter(torch.ones(1))], lr=0.1)
for _ in range(2):
    try:
        failing.step()
    except RuntimeError:
        pass
for _ in range(2):
    outer.step(); iterations += 1
print(iterations)
"""
    out = run_python(tmp_path, code)
    _, *steps = recorded(tmp_path)
    # the GAN's 4, the outer optimizer's 3 + 2 (it becomes the lead on its second step: its first is inside step 5)
    assert int(out.stdout) == 9 and len(steps) == 4 + 3 - 1 + 2


@pytest.mark.slow     # torch processes, forked and spawned
def test_only_the_first_process_of_a_rank_records_and_forked_children_never(tmp_path: Path) -> None:
    code = """
import os, subprocess, sys, torch
opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
opt.step()
pid = os.fork()
if pid == 0:
    opt.step(); opt.step()
    os._exit(0)
os.waitpid(pid, 0)
other = subprocess.run([sys.executable, "-c", "import torch; torch.optim.SGD([torch.nn.Parameter(torch.ones(1))]).step()"],
                       capture_output=True, text=True)
print(other.stderr.strip())
opt.step()
"""
    out = run_python(tmp_path, code)
    _, *steps = recorded(tmp_path)
    assert [s["step"] for s in steps] == [1, 2]           # the parent's two; not the child's, not the other's
    assert "not recorded" in out.stdout and "is another process's of this rank" in out.stdout


@pytest.mark.slow
def test_the_hook_registers_when_torch_is_imported_late_and_says_nothing_without_torch(tmp_path: Path) -> None:
    late = run_python(tmp_path, "import json, sys\nassert 'torch' not in sys.modules\nimport torch.optim as o\n"
                      "o.SGD([__import__('torch').nn.Parameter(__import__('torch').ones(1))]).step()\n"
                      "import torch.optim.optimizer as m\nprint(len(m._global_optimizer_post_hooks))")
    assert late.stdout.strip() == "1" and len(recorded(tmp_path)) == 2
    (tmp_path / "bare").mkdir()     # a run directory (the hook makes only its steps/ in it)
    bare = run_python(tmp_path / "bare", "import sys\nprint(any(type(f).__name__ == '_Finder' for f in sys.meta_path))")
    assert bare.stdout.strip() == "True" and bare.stderr == "" and not (tmp_path / "bare" / "steps").exists()


@pytest.mark.slow
def test_a_program_with_its_own_torch_profiler_keeps_it(tmp_path: Path) -> None:
    code = """
import torch
opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
with torch.profiler.profile() as prof:
    for _ in range(8):
        opt.step()
print(sum(e.name.startswith("Optimizer.step") for e in prof.events()))
"""
    out = run_python(tmp_path, code, HPCPROF_PROFILE_TOOL="torch", HPCPROF_STEPS_DRIVE="1",
                     HPCPROF_PROFILE_DIR=str(tmp_path / "torch"))
    assert out.stdout.split()[-1] == "8" and "runs its own torch.profiler" in out.stderr
    assert len(recorded(tmp_path)) == 9 and not (tmp_path / "torch").exists()


def test_steps_files_a_write_cut_short_and_a_file_without_header(tmp_path: Path) -> None:
    (tmp_path / "steps").mkdir()
    (tmp_path / "steps" / "rank0.jsonl").write_text('{"rank":0,"pid":1,"host":"h","tool":"nsys","skip":1,"steps":1}\n'
                                                    '{"step":1,"end_ns":10,"ns":null}\n{"step":2,"end_ns":30,"ns":20}\n'
                                                    '{"step":3,"end_')
    (tmp_path / "steps" / "rank1.jsonl").write_text('{"step":1,"end_ns":10,"ns":null}\n')
    tables, problems = steps_tables(tmp_path)
    df = tables["times"]
    assert df[["rank", "step", "in_window", "tool"]].values.tolist() == [[0, 1, False, "nsys"], [0, 2, True, "nsys"]]
    assert df["duration_ns"].tolist()[1] == 20 and len(problems) == 2
    assert problems[0].endswith("rank0.jsonl: 2 steps read; left out: 1 line: cut short at the end of the file")
    assert "rank1.jsonl: skipped (rank1.jsonl: no step hook header on its first line)" in problems[1]


def test_the_hook_and_the_config_name_the_same_ranges() -> None:
    sys.path.insert(0, str(INJECT))
    try:
        import _hpcprof_steps
    finally:
        sys.path.remove(str(INJECT))
    assert (_hpcprof_steps.STEP_RANGE, _hpcprof_steps.UNMEASURED_RANGE) == (STEP_RANGE, UNMEASURED_STEP_RANGE)


# ---- the options, rendered ---------------------------------------------------------------------


def write_experiment(path: Path, argv: list[str], extra: str = "") -> Path:
    path.write_text(f"name: steps\nworkload:\n  kind: command\n  argv: {json.dumps(argv)}\n"
                    f"resources:\n  nodes: 1\n  ranks_per_node: 2\n{extra}")
    return path


@pytest.mark.slow
def test_the_hook_opens_nsys_capture_range_and_keeps_the_program_running(tmp_path: Path) -> None:
    exp = write_experiment(tmp_path / "exp.yaml", ["python", "train.py"],
                           "profile:\n  tool: nsys\n  nsys:\n    capture_range: cudaProfilerApi\n")
    hpcprof("render", str(exp), "--site", "local", "-o", "out", cwd=tmp_path, check=True)
    wrapper = (tmp_path / "out" / "rank_wrapper.sh").read_text()
    assert "--capture-range=cudaProfilerApi --capture-range-end=stop" in wrapper   # nsys' default ends the program
    for line in ("export HPCPROF_STEPS=1", "export HPCPROF_STEPS_SKIP=5", "export HPCPROF_STEPS_COUNT=10",
                 "export HPCPROF_STEPS_DRIVE=1", "export HPCPROF_STEPS_CAPTURE=1"):
        assert line in wrapper
    assert (tmp_path / "out" / "inject" / "_hpcprof_steps.py").is_file()
    off = hpcprof("render", str(exp), "--site", "local", "-o", "off", "--set", "profile.window.auto=false",
                  "--set", "forensics.enabled=false", cwd=tmp_path)
    assert "profile.window.opened_by_program" in one_line_error(off)      # without the hook: as before
    hpcprof("render", str(exp), "--site", "local", "-o", "own", "--set", "profile.window.opened_by_program=true",
            "--set", "forensics.enabled=false", cwd=tmp_path, check=True)
    own = (tmp_path / "own" / "rank_wrapper.sh").read_text()
    assert "export HPCPROF_STEPS_DRIVE=0" in own and "HPCPROF_STEPS_CAPTURE" not in own
    assert "--capture-range-end" not in own and sorted(p.name for p in (tmp_path / "own" / "inject").iterdir()) == [
        "_hpcprof_files.py", "_hpcprof_memory.py", "_hpcprof_sampler.py", "_hpcprof_steps.py", "sitecustomize.py"]


def test_a_window_the_program_never_reached_is_said(tmp_path: Path) -> None:
    from hpcprof.run.record import read_record
    from hpcprof.tools.nsys.analysis.collect import NOTHING_RECORDED, NsysCollector

    exp = write_experiment(tmp_path / "exp.yaml", ["python", "train.py"],
                           "profile:\n  tool: nsys\n  nsys:\n    capture_range: cudaProfilerApi\n")
    hpcprof("render", str(exp), "--site", "local", "-o", "run", cwd=tmp_path, check=True)
    run = tmp_path / "run"
    (run / "steps").mkdir()
    (run / "steps" / "rank0.jsonl").write_text('{"rank":0,"pid":1,"host":"h","tool":"nsys","skip":5,"steps":10}\n' +
                                               "".join(f'{{"step":{n},"end_ns":{n},"ns":1}}\n' for n in (1, 2, 3)))
    for rank in (0, 1):
        (run / "logs" / f"rank{rank}.log").write_text(f"{NOTHING_RECORDED}\n")
    record = read_record(run / "config.json")
    lines = [NsysCollector().missing_cause(run, record, rank) for rank in (0, 1)]
    assert "never opened: the step hook saw 3 optimizer steps, the window opens after step 5" in lines[0]
    assert "never opened: the step hook saw no optimizer steps" in lines[1]


@pytest.mark.parametrize(("setting", "field"), [
    ("profile.window.skip_steps=0", "profile.window.skip_steps"),
    ("profile.window.steps=-1", "profile.window.steps"),
    ("profile.window.auto=maybe", "profile.window.auto"),
    ("profile.torch.active=5", "profile.torch.active"),
    ("gpu_affinity=left", "gpu_affinity"),
])
def test_bad_options_are_one_line_naming_the_field(tmp_path: Path, setting: str, field: str) -> None:
    exp = write_experiment(tmp_path / "exp.yaml", ["python", "train.py"], "profile:\n  tool: torch\n")
    result = hpcprof("render", str(exp), "--site", "local", "-o", "out", "--set", setting, cwd=tmp_path)
    assert result.returncode == 2 and field in one_line_error(result)


# ---- real jobs on the local site ---------------------------------------------------------------


def trainer_said(run: Path, rank: int) -> dict[str, Any]:
    line = next(line for line in (run / "logs" / f"rank{rank}.log").read_text().splitlines()
                if line.startswith("trainer: "))
    return json.loads(line.removeprefix("trainer: "))


def metrics(run: Path) -> dict[str, float]:
    headline = read_headline(run)
    assert headline is not None
    return {name: value for name, value, _ in headline.metrics}


def runs_by(cwd: Path, key: str) -> dict[Any, Path]:
    out = {}
    for config in sorted((cwd / "hpcprof-runs").glob("*/*/config.json")):
        params = json.loads(config.read_text())["sweep_point"]["params"]
        out[json.dumps(params[key])] = config.parent
    return out


@pytest.mark.slow     # real multi-rank jobs (the developer tier leaves them to the full suite)
def test_unmodified_trainers_get_their_steps_under_the_local_launcher(tmp_path: Path) -> None:
    """A plain loop, a loop with gradient accumulation and a program without an optimizer, each a
    user script that only calls init_process_group("gloo"): every rank gets RANK, WORLD_SIZE,
    LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT; the steps recorded are the
    script's own optimizer steps, the window's are window.iterations."""
    argv = [[sys.executable, str(TRAINER), mode, "9"] for mode in ("plain", "accumulate", "infer")]
    exp = write_experiment(tmp_path / "exp.yaml", ["true"], "profile:\n  window:\n    skip_steps: 2\n    steps: 4\n"
                           f"sweep:\n  workload.argv: {json.dumps(argv)}\n")
    hpcprof("submit", str(exp), "--site", "local", "--wait", cwd=tmp_path, check=True, timeout=600)
    done = hpcprof("collect", cwd=tmp_path, check=True)
    collected = done.stdout + done.stderr
    runs = runs_by(tmp_path, "workload.argv")
    for args in argv:
        run, mode = runs[json.dumps(args)], args[2]
        for rank in (0, 1):
            said = trainer_said(run, rank)
            assert said["env"] == {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
                                   "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                   "MASTER_PORT": said["env"]["MASTER_PORT"]} and said["world"] == 2
        if mode == "infer":
            assert trainer_said(run, 0)["optimizer_steps"] == 0 and not (run / "steps").exists()
            assert read_table(run, "steps_times") is None and "window.iterations" not in metrics(run)
            assert f"{run.name}: note: the step hook saw no optimizer step" in collected
            continue
        steps = read_table(run, "steps_times")
        assert steps is not None
        for rank in (0, 1):
            mine = steps[steps["rank"] == rank]
            assert len(mine) == trainer_said(run, rank)["optimizer_steps"] == 9
            assert mine.loc[mine["in_window"], "step"].tolist() == [3, 4, 5, 6]
        found = metrics(run)
        assert found["window.iterations"] == 4
        assert set(list_tables(run)) <= {t.name for t in c.every_table(catalogs())}
        assert all(c.declared(name) is not None for name in found)
        window = steps[steps["in_window"]]
        assert found["iteration.median"] == pytest.approx(window["duration_ns"].astype(float).median() / 1e6)


@pytest.mark.slow     # real multi-rank jobs (the developer tier leaves them to the full suite)
def test_torch_on_a_command_records_the_window_and_the_overhead_is_said(tmp_path: Path) -> None:
    """profile.tool: torch on a trainer that has no profiler code: the hook's steps drive
    torch.profiler (ProfilerStep#1..#5 for window steps 3..6 and one more); the same experiment
    under `tool: none` gives the profiler's perturbation of each step, in report and compare."""
    exp = write_experiment(tmp_path / "exp.yaml", [sys.executable, str(TRAINER), "plain", "10"],
                           "profile:\n  window:\n    skip_steps: 2\n    steps: 4\nsweep:\n  profile.tool: [none, torch]\n")
    hpcprof("submit", str(exp), "--site", "local", "--wait", cwd=tmp_path, check=True, timeout=600)
    done = hpcprof("collect", cwd=tmp_path, check=True)
    collected = done.stdout + done.stderr
    runs = runs_by(tmp_path, "profile.tool")
    traced, plain = runs['"torch"'], runs['"none"']
    for rank in (0, 1):
        trace = json.loads((traced / "profiles" / "torch" / f"rank{rank}.pt.trace.json").read_text())
        names = sorted({e["name"] for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")})
        assert names == [f"ProfilerStep#{n}" for n in range(1, 6)]
    assert "no GPU events" in collected          # a CPU trace: the steps are there, HTA's GPU analyses are not
    steps = read_table(traced, "steps_times")
    assert steps is not None and set(steps["tool"]) == {"torch"}
    assert metrics(traced)["window.iterations"] == 4    # no GPU window on a CPU: the hook's steps
    expected = 100 * (metrics(traced)["iteration.median"] / metrics(plain)["iteration.median"] - 1)
    compared = json.loads(hpcprof("compare", "--format", "json", cwd=tmp_path, check=True).stdout)
    by_tool = {row["profile.tool"]: row for row in compared}
    assert by_tool["torch"][c.PROFILER_OVERHEAD.column] == pytest.approx(expected)
    assert by_tool["none"].get(c.PROFILER_OVERHEAD.column) is None
    table = hpcprof("compare", cwd=tmp_path, check=True).stdout
    report = hpcprof("report", traced.name, cwd=tmp_path, check=True).stdout
    sentence = "torch slowed each step by" if expected > 10 else "torch changed each step by"
    assert sentence in table and sentence in report and plain.name in report
    hpcprof("report", "--html", "report.html", cwd=tmp_path, check=True)
    assert sentence in (tmp_path / "report.html").read_text()
