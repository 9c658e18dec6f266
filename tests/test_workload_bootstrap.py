"""Rank discovery, schedules, statistics and flag round trips of the workloads (no launcher needed)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hpcprof.core.errors import UserError
from hpcprof.core.models import validate
from hpcprof.workloads import args, options, ranks

#: the launcher variables besides ranks' own rank variables and MPI markers
OTHER_LAUNCHER_VARS = ["HPCPROF_RANK", "HPCPROF_LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "SLURM_NTASKS",
                       "TORCHELASTIC_RUN_ID"]


@pytest.fixture
def bare_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in [*ranks.GLOBAL_RANK_VARS, *ranks.LOCAL_RANK_VARS, *ranks.MPI_MARKERS, *OTHER_LAUNCHER_VARS]:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_single_process_layout(bare_env: pytest.MonkeyPatch) -> None:
    assert ranks.discover_layout() == ranks.RankLayout(0, 1, 0, "single")


def test_torchrun_layout(bare_env: pytest.MonkeyPatch) -> None:
    for name, value in {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "n1"}.items():
        bare_env.setenv(name, value)
    assert ranks.discover_layout() == ranks.RankLayout(3, 4, 1, "torchrun")


def test_torchrun_workers_started_by_srun_are_not_mpi_ranks(bare_env: pytest.MonkeyPatch) -> None:
    """srun starts one torchrun agent per node; its workers inherit srun's PMI variables and
    SLURM_LOCALID=0, but their rank and local rank are torchrun's (MPI_Init would fail there)."""
    for name, value in {"TORCHELASTIC_RUN_ID": "none", "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
                        "MASTER_ADDR": "node1", "PMI_FD": "13", "PMI_RANK": "1", "SLURM_PROCID": "1",
                        "SLURM_LOCALID": "0"}.items():
        bare_env.setenv(name, value)
    assert ranks.discover_layout() == ranks.RankLayout(3, 4, 1, "torchrun")


def test_srun_layout_and_wrapper_local_rank_wins(bare_env: pytest.MonkeyPatch) -> None:
    for name, value in {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "HPCPROF_LOCAL_RANK": "2"}.items():
        bare_env.setenv(name, value)
    assert ranks.discover_layout() == ranks.RankLayout(5, 8, 2, "srun")


def test_local_rank_order_prefers_launcher_over_slurm(bare_env: pytest.MonkeyPatch) -> None:
    bare_env.setenv("SLURM_LOCALID", "0")  # inherited by every rank of an mpiexec inside a Slurm job
    bare_env.setenv("MPI_LOCALRANKID", "3")
    assert ranks.local_rank_from_env() == 3


@pytest.mark.parametrize(
    ("nodelist", "host"),
    [("nid[001-004,010],gpu7", "nid001"), ("x3005c0s13b0n0", "x3005c0s13b0n0"), ("gpu[7,9]", "gpu7"), ("a,b", "a")],
)
def test_first_slurm_host(nodelist: str, host: str) -> None:
    from hpcprof.workloads import bootstrap

    assert bootstrap.first_slurm_host(nodelist) == host


def test_cpu_device_and_results_dir(bare_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from hpcprof.workloads import bootstrap

    assert bootstrap.choose_device("cpu", 3, "reverse").type == "cpu"
    bare_env.delenv("HPCPROF_RUN_DIR", raising=False)
    assert bootstrap.results_dir(None) == Path("results")
    bare_env.setenv("HPCPROF_RUN_DIR", str(tmp_path))
    assert bootstrap.results_dir(None) == tmp_path / "results"
    assert bootstrap.results_dir(Path("x")) == Path("x")


def test_schedule_parsing() -> None:
    assert args.parse_schedule("wait=1,warmup=1,active=3,repeat=1") == {
        "skip_first": 0, "wait": 1, "warmup": 1, "active": 3, "repeat": 1
    }
    assert args.schedule_length(args.parse_schedule("skip_first=2,wait=1,active=2,repeat=2")) == 8
    for bad in ("wait=x", "sleep=1", "active=0", "wait"):
        with pytest.raises(ValueError):
            args.parse_schedule(bad)


def test_schedule_source_named_in_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCPROF_TORCH_SCHEDULE", "wait=oops")
    with pytest.raises(UserError, match="HPCPROF_TORCH_SCHEDULE: bad item 'wait=oops'"):
        args.check_schedule_fits("seqpar", None, 10)


def test_phase_stats_across_ranks() -> None:
    from hpcprof.workloads import timing

    rows = [
        {"rank": 0, "iteration": 0, "phase": "a", "time_ms": 1.0},
        {"rank": 0, "iteration": 1, "phase": "a", "time_ms": 3.0},
        {"rank": 1, "iteration": 0, "phase": "a", "time_ms": 4.0},
        {"rank": 1, "iteration": 1, "phase": "a", "time_ms": 6.0},
    ]
    (stats,) = timing.phase_stats(rows, ["a", "missing"])
    assert stats == {
        "phase": "a", "ranks": 2, "samples": 4, "mean_ms": 3.5, "min_rank_mean_ms": 2.0, "max_rank_mean_ms": 5.0,
        "median_ms": 3.5, "min_ms": 1.0, "max_ms": 6.0,
    }


def test_bool_flags_round_trip() -> None:
    from hpcprof.workloads import seqpar

    args = validate(seqpar.SeqparArgs, {"check": False, "torch_gzip": True}, "seqpar")
    assert options.to_argv(args) == ["--no-check", "--torch-gzip"]
    assert seqpar.parse_args(options.to_argv(args)) == args


NO_TORCH_SCRIPT = r"""
import contextlib, io, sys
from hpcprof.config.experiment import expand
from hpcprof.render.job import render_point
from hpcprof.workloads import workload_args_model, rank_argv
seqpar_model, ddp_model = workload_args_model("seqpar"), workload_args_model("ddp")
assert rank_argv("seqpar", [], seqpar_model(check=True), "py") == ["py", "-m", "hpcprof.workloads.seqpar", "--check"]
assert rank_argv("ddp", [], ddp_model(echo_input="in"), "py") == ["py", "-m", "hpcprof.workloads.ddp", "--echo-input", "in"]
assert "torch" not in sys.modules, "rendering imported torch"

import hpcprof.cli
from hpcprof.cli import main
runs = [["--help"], ["bench", "--help"],
        ["render", sys.argv[1], "--site", "polaris", "--set", "resources.account=PROJECT"],
        ["render", sys.argv[2], "--site", "local"],
        ["submit", sys.argv[1], "--site", "polaris", "--set", "resources.account=PROJECT", "--dry-run",
         "--workdir", sys.argv[3]]]
for argv in runs:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(argv, standalone_mode=False)
        except SystemExit as exc:
            assert not exc.code, (argv, exc.code)
    assert out.getvalue(), argv
    assert "torch" not in sys.modules, f"hpcprof {' '.join(argv)} imported torch"
print("no torch")
"""


def test_render_and_submit_do_not_import_torch(tmp_path: Path) -> None:
    """Login nodes render and submit: the Args models and rank argv come from the torch-free args.py."""
    repo = Path(__file__).resolve().parents[1]
    ddp_experiment = tmp_path / "ddp.yaml"
    ddp_experiment.write_text(
        "name: ddp-echo\n"
        f"workload: {{kind: ddp, args: {{echo_input: {repo / 'examples' / 'echo_gpt2'}, epochs: 2}}}}\n"
        "resources: {nodes: 1, ranks_per_node: 2}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", NO_TORCH_SCRIPT, str(repo / "examples" / "seqpar_polaris.yaml"), str(ddp_experiment),
         str(tmp_path / "runs")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("no torch")


def test_args_module_imports_no_torch_and_workloads_reexport_it() -> None:
    from hpcprof.workloads import bootstrap, seqpar, timing

    proc = subprocess.run(
        [sys.executable, "-c", "import sys, hpcprof.workloads.args, hpcprof.workloads.options, "
         "hpcprof.workloads.ranks, hpcprof.workloads.seqpar, hpcprof.workloads.ddp; assert 'torch' not in sys.modules"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert seqpar.SeqparArgs is args.SeqparArgs and seqpar.launch_argv is args.launch_argv
    assert timing.parse_schedule is args.parse_schedule
    assert bootstrap.Backend is args.Backend and bootstrap.GpuMap is args.GpuMap


REFUSED_SCRIPT = r"""
import contextlib, io, runpy, sys
echo = sys.argv[1]
cases = [("hpcprof.workloads.seqpar", ["-s", "15"], "seqpar: sequence_length: 15 is not divisible by the 4 ranks"),
         ("hpcprof.workloads.seqpar", ["-it", "4", "--torch-profiler", "--torch-schedule", "wait=5"],
          "seqpar: torch_schedule: the schedule needs 6 steps, only 4 are run"),
         ("hpcprof.workloads.ddp", ["--echo-input", echo],
          "ddp: world_size: the config asks for 2 ranks, the launcher started 4"),
         ("hpcprof", ["bench", "ceilings", "--collective", "all_gather:6:float32"],
          "--collective all_gather:6:float32: 6 bytes do not split")]
for module, argv, message in cases:
    sys.argv = ["-m", *argv]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            assert exc.code == 2, (module, argv, exc.code, err.getvalue())
    assert message in err.getvalue(), (module, argv, err.getvalue())
    assert "torch" not in sys.modules, f"{module} {' '.join(argv)} imported torch"
print("refused without torch")
"""


def test_refused_runs_never_import_torch(tmp_path: Path) -> None:
    """The workloads' entries (`python -m`, as ranks run them) check their input against the job's ranks
    (4 here, torchrun's variables) before torch loads: a refused run costs no `import torch`."""
    repo = Path(__file__).resolve().parents[1]
    drop = ("HPCPROF_", "PMI_", "PMIX_", "OMPI_", "SLURM_", "PALS_", "MPI_LOCAL", "TORCHELASTIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop) and k not in ("LOCAL_RANK", "MASTER_PORT")}
    env.update(RANK="0", WORLD_SIZE="4", MASTER_ADDR="127.0.0.1")
    proc = subprocess.run([sys.executable, "-c", REFUSED_SCRIPT, str(repo / "examples" / "echo_gpt2")], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("refused without torch")
    assert not any(tmp_path.iterdir())     # nothing written


PROFILED_SHUTDOWN_SCRIPT = r"""
import os
from hpcprof.workloads import bootstrap, timing
import torch, torch.distributed as dist

def gloo_threads():
    names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
    return sorted(n for n in names if "gloo" in n)

ctx = bootstrap.init_distributed(bootstrap.discover_layout(), "gloo", "cpu")
prof = timing.make_torch_profiler(0, timing.parse_schedule("wait=1,warmup=1,active=2"), False)
x, out = torch.ones(4), torch.empty(4)
prof.start()
for _ in range(4):
    dist.all_gather_into_tensor(out, x)
    prof.step()
prof.stop()
before = gloo_threads()
bootstrap.shutdown(ctx)
print("before", before, "after", gloo_threads())
"""


@pytest.mark.slow
def test_shutdown_after_torch_profiler_frees_the_process_group(bare_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Regression: torch.profiler's first start imports torch.distributed.nn.functional, whose default
    arguments captured the live default group; destroy_process_group then left the gloo threads
    running into interpreter exit, where one could abort the process ("terminate called without an
    active exception", exit 6) after all results were written. Deterministic: checks the threads."""
    bare_env.setenv("HPCPROF_PROFILE_DIR", str(tmp_path / "torch"))
    bare_env.setenv("OMP_NUM_THREADS", "1")
    proc = subprocess.run([sys.executable, "-c", PROFILED_SHUTDOWN_SCRIPT], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("before ['") and line.endswith("after []"), line  # gloo threads existed, then joined
    assert (tmp_path / "torch" / "rank0.pt.trace.json").is_file()


def test_aborting_rank_waits_until_its_message_is_read(tmp_path: Path) -> None:
    """The wait before MPI_Abort ends when the reader has drained the pipe, not before, and is bounded."""
    from hpcprof.workloads import bootstrap

    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"error: the cause\n")
    got: list[bytes] = []

    def late_reader() -> None:
        time.sleep(0.3)
        got.append(os.read(read_fd, 100))

    start = time.monotonic()
    reader = threading.Thread(target=late_reader)
    reader.start()
    bootstrap._wait_for_forward(write_fd, 10.0)
    waited = time.monotonic() - start
    reader.join()
    assert got == [b"error: the cause\n"]
    assert 0.3 <= waited < 5.0  # not before the launcher's read, which comes 0.3 s in

    os.write(write_fd, b"never read\n")  # nobody reads: the wait gives up at its limit
    start = time.monotonic()
    bootstrap._wait_for_forward(write_fd, 0.2)
    assert 0.2 <= time.monotonic() - start < 2.0

    plain = tmp_path / "stderr.txt"  # not a pipe (a file, a terminal): no wait at all
    with plain.open("w") as handle:
        handle.write("x" * 100)
        handle.flush()
        start = time.monotonic()
        bootstrap._wait_for_forward(handle.fileno(), 10.0)
        assert time.monotonic() - start < 1.0
    os.close(read_fd)
    os.close(write_fd)
