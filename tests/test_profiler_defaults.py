"""The profilers' low-overhead defaults (hpcprof.tools.nsys.profiler, hpcprof.tools.torch.profiler): nsys traces
CUDA and NVTX without CPU sampling or context switches, torch.profiler records no shapes or stacks,
and every costly option is opt-in, its flag written only where the experiment asks for it; the
default `nsys profile` line runs on nsys 2022.4, the oldest nsys hpcprof supports, which refuses the
CUDA event trace flag (why that option stays nsys's own unless set); a run's slowdown names the
costly options its profiler had on."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest
from hpcprof_cli import hpcprof

from hpcprof.core import catalog as c
from hpcprof.report.overhead import MEMORY_HISTORY, costly_options, in_run
from hpcprof.run.record import read_record
from hpcprof.tools.nsys.profiler import NsysOptions
from hpcprof.tools.torch.profiler import TorchOptions, launch

NSYS_2022 = Path("/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys")   # tests/services/nsys.sh
INJECT = Path(__file__).resolve().parents[1] / "hpcprof" / "inject"

#: each costly nsys option as an experiment sets it -> the flag it adds
COSTLY_NSYS = {
    "OS runtime": ({"trace": ["cuda", "nvtx", "osrt"]}, "--trace=cuda,nvtx,osrt"),
    "CUDA event trace": ({"cuda_event_trace": True}, "--cuda-event-trace=true"),
    "CPU sampling": ({"sample": "process-tree"}, "--sample=process-tree"),
    "context switches": ({"cpuctxsw": "process-tree"}, "--cpuctxsw=process-tree"),
    "GPU context switches": ({"gpuctxsw": True}, "--gpuctxsw=true"),
    "Python sampling": ({"python_sampling": True}, "--python-sampling=true"),
}


def test_the_nsys_default_is_cuda_and_nvtx_without_sampling() -> None:
    assert NsysOptions().argv() == ["--trace=cuda,nvtx", "--capture-range=none", "--stats=false", "--sample=none",
                                    "--cpuctxsw=none", "--export=sqlite", "--force-overwrite=true"]


@pytest.mark.parametrize("name", COSTLY_NSYS)
def test_each_costly_nsys_option_is_opt_in(name: str) -> None:
    fields, flag = COSTLY_NSYS[name]
    assert flag not in NsysOptions().argv()
    assert flag in msgspec.convert(fields, NsysOptions).argv()


def test_null_gives_nsys_its_own_default() -> None:
    """`sample: null` leaves the flag out: nsys's own default (CPU sampling where it launches the program)."""
    argv = msgspec.convert({"sample": None, "cpuctxsw": None}, NsysOptions).argv()
    assert not any(a.startswith(("--sample", "--cpuctxsw")) for a in argv)


def test_the_default_nsys_line_runs_on_nsys_2022(tmp_path: Path) -> None:
    """nsys 2022.4 takes every flag of the default line, and refuses `--cuda-event-trace` (2024 and later)."""
    if not NSYS_2022.exists():
        pytest.skip("nsys 2022.4 not installed (tests/services/nsys.sh)")
    argv = NsysOptions(export_sqlite=False).argv()
    done = subprocess.run([str(NSYS_2022), "profile", *argv, "-o", str(tmp_path / "rank0"), "/bin/true"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "unrecognised option" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert list(tmp_path.glob("rank0.*"))           # the capture (.qdstrm, or .nsys-rep where the importer is there)
    refused = subprocess.run([str(NSYS_2022), "profile", *NsysOptions(cuda_event_trace=False).argv(),
                              "-o", str(tmp_path / "event"), "/bin/true"], capture_output=True, text=True, timeout=120)
    assert "unrecognised option '--cuda-event-trace=false'" in refused.stdout + refused.stderr


def test_torch_profiler_records_no_shapes_stacks_or_memory_unless_asked() -> None:
    recorders = ("HPCPROF_TORCH_SHAPES", "HPCPROF_TORCH_STACK", "HPCPROF_TORCH_MEMORY")
    env = launch(TorchOptions(), "").env
    assert [env[name] for name in recorders] == ["0", "0", "0"]
    env = launch(TorchOptions(record_shapes=True, with_stack=True, profile_memory=True), "").env
    assert [env[name] for name in recorders] == ["1", "1", "1"]


@pytest.mark.slow     # two torch processes under torch.profiler
def test_the_hooks_torch_profiler_records_shapes_stacks_and_memory_when_asked(tmp_path: Path) -> None:
    """A real Python under the step hook with the opt-in recorders on: the trace's operators carry
    their input shapes, the Python functions that called them are in it, and so are the tensors'
    allocations; the default trace has none of the three."""
    loop = ("import torch\nm = torch.nn.Linear(4, 4)\no = torch.optim.SGD(m.parameters(), lr=0.1)\n"
            "for _ in range(12):\n    m(torch.ones(2, 4)).sum().backward(); o.step(); o.zero_grad()\n")
    seen = {}
    for name, options in (("asked", TorchOptions(record_shapes=True, with_stack=True, profile_memory=True)),
                          ("default", TorchOptions())):
        run = tmp_path / name
        (run / "profiles").mkdir(parents=True)
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(INJECT), "HPCPROF_RUN_DIR": str(run), "HPCPROF_RANK": "0",
               "HPCPROF_STEPS": "1", "HPCPROF_STEPS_SKIP": "3", "HPCPROF_STEPS_COUNT": "3", "HPCPROF_STEPS_DRIVE": "1",
               "HPCPROF_PROFILE_TOOL": "torch", "HPCPROF_PROFILE_DIR": str(run / "profiles"), "OMP_NUM_THREADS": "1",
               **launch(options, "").env}
        subprocess.run([sys.executable, "-c", loop], env=env, check=True, timeout=120, capture_output=True)
        events = json.loads((run / "profiles" / "rank0.pt.trace.json").read_text())["traceEvents"]
        ops = [e for e in events if e.get("cat") == "cpu_op"]
        assert ops
        seen[name] = (any("Input Dims" in e.get("args", {}) for e in ops),
                      any(e.get("cat") == "python_function" for e in events),
                      any(e.get("name") == "[memory]" for e in events))
    assert seen == {"asked": (True, True, True), "default": (False, False, False)}


@pytest.mark.parametrize(("profile", "expected"), [
    ("{tool: nsys}", ()),
    ("{tool: torch}", ()),
    ("{tool: nsys, nsys: {trace: [cuda, nvtx, osrt], sample: null, cuda_event_trace: true}}",
     ("osrt tracing", "CPU sampling (nsys default)", "CUDA event tracing")),
    ("{tool: torch, torch: {record_shapes: true, profile_memory: true}}", ("operator shapes", "memory")),
    ("{tool: nsys, memory: true}", ("memory history (profile.memory)",)),
    ("{tool: none, memory: true}", ()),
])
def test_a_runs_slowdown_names_the_costly_options_it_had_on(tmp_path: Path, profile: str,
                                                            expected: tuple[str, ...]) -> None:
    """The options read back from the config.json that `render` writes, and said after the slowdown."""
    (tmp_path / "exp.yaml").write_text("name: costly\nworkload: {kind: command, argv: [python3, train.py]}\n"
                                       f"resources: {{nodes: 1, ranks_per_node: 2}}\nprofile: {profile}\n")
    hpcprof("render", "exp.yaml", "--site", "local", "-o", "out", cwd=tmp_path, check=True)
    record = read_record(tmp_path / "out" / "config.json")
    assert costly_options(record.experiment.profile) == expected
    metrics = [(c.PROFILER_SLOWDOWN.name, 4.0, "%"), (c.PROFILER_UNPROFILED_STEP.name, 8.0, "ms")]
    found = in_run(record.tool if record.tool != "none" else MEMORY_HISTORY, metrics)
    assert found is not None
    assert found.sentence().startswith(f"{record.tool if record.tool != 'none' else MEMORY_HISTORY} changed each step")
    text = replace(found, options=expected).sentence()
    assert ("costly options on: " + ", ".join(expected) in text) if expected else "costly" not in text
