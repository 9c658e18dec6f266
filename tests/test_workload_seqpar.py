"""seqpar through real launchers (MPICH Hydra mpiexec, torchrun) with gloo on CPU."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from hpcprof.core.errors import UserError
from hpcprof.core.models import validate

BIN = Path(sys.executable).parent
MPIEXEC = BIN / "mpiexec"
S, H, ITERS = 16, 8, 6


def clean_env(**extra: str) -> dict[str, str]:
    """The test's environment without launcher/hpcprof variables, one thread per rank."""
    drop = ("HPCPROF_", "PMI_", "PMIX_", "OMPI_", "SLURM_", "PALS_", "MPI_LOCAL")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update({"OMP_NUM_THREADS": "1", **extra})
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


def mpirun(n: int, argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(MPIEXEC), "-n", str(n), sys.executable, "-m", "hpcprof.workloads.seqpar", *argv]
    return subprocess.run(cmd, cwd=cwd, env=clean_env(**env), capture_output=True, text=True, timeout=180)


def small(*extra: str) -> list[str]:
    return ["-s", str(S), "-d", str(H), "-it", str(ITERS), "-wit", "2", *extra]


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_two_ranks_check_and_schema(tmp_path: Path, precision: str) -> None:
    from hpcprof.workloads import seqpar_bench

    proc = mpirun(2, small("-p", precision, "--check"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "check vs float64" in proc.stdout and "PASS" in proc.stdout
    result = json.loads((tmp_path / "results" / "seqpar.json").read_text())
    assert result["schema"] == "hpcprof.seqpar/1"
    cfg = result["config"]
    assert cfg["world_size"] == 2 and cfg["precision"] == precision
    assert cfg["shapes"] == {"input": [S // 2, H], "gathered": [S, H], "w1": [H, H // 2], "w2": [H // 2, H]}
    assert {"torch", "cuda", "nccl", "mpi", "backend"} <= set(result["versions"])
    assert result["versions"]["backend"] == "gloo" and result["versions"]["mpi"].startswith("MPICH")
    assert [r["rank"] for r in result["ranks"]] == [0, 1]
    assert all(c["passed"] and c["allgather_exact"] for c in result["check"])

    phases = pd.DataFrame(result["phases"]).set_index("phase")
    assert list(phases.index) == seqpar_bench.PHASES
    assert (phases["ranks"] == 2).all() and (phases["samples"] == 2 * ITERS).all()
    assert (phases["min_rank_mean_ms"] <= phases["max_rank_mean_ms"]).all()
    elem = 4 if precision == "float32" else 2
    for coll in ("allgather", "reduce_scatter"):
        row = phases.loc[coll]
        assert row["bytes"] == S * H * elem
        assert row["algbw_GBps"] == pytest.approx(S * H * elem / (row["mean_ms"] * 1e-3) / 1e9)
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * 0.5)
    for mm in ("matmul1", "matmul2"):
        row = phases.loc[mm]
        assert row["flops"] == 2 * S * H * H // 2
        assert row["tflops"] == pytest.approx(row["flops"] / (row["mean_ms"] * 1e-3) / 1e12)

    iterations = pd.DataFrame(result["iterations"])
    assert len(iterations) == 2 * ITERS * len(seqpar_bench.PHASES)
    assert set(iterations.columns) == {"rank", "iteration", "phase", "time_ms", "counted", "window", "profiled"}
    assert (iterations["time_ms"] > 0).all() and iterations["counted"].all()
    assert not (iterations["window"].any() or iterations["profiled"].any())    # no torch.profiler: none touched


@pytest.mark.slow
def test_torch_profiler_one_trace_per_rank(tmp_path: Path) -> None:
    from hpcprof.workloads import seqpar_bench

    run_dir = tmp_path / "run"
    profile_dir = run_dir / "profiles" / "torch"
    proc = mpirun(
        2,
        small("--torch-gzip"),
        tmp_path,
        HPCPROF_RUN_DIR=str(run_dir),
        HPCPROF_PROFILE_TOOL="torch",
        HPCPROF_PROFILE_DIR=str(profile_dir),
        HPCPROF_TORCH_SCHEDULE="wait=1,warmup=1,active=2,repeat=1",
    )
    assert proc.returncode == 0, proc.stderr
    assert (run_dir / "results" / "seqpar.json").is_file()
    assert sorted(p.name for p in profile_dir.iterdir()) == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    for rank in (0, 1):
        trace = json.loads(gzip.decompress((profile_dir / f"rank{rank}.pt.trace.json.gz").read_bytes()))
        assert trace["distributedInfo"]["rank"] == rank
        names = {e.get("name") for e in trace["traceEvents"]}
        assert set(seqpar_bench.PHASES) <= names  # the phases are record_function ranges
        assert any("matmul" in str(n) for n in names)
        steps = {n for n in names if str(n).startswith("ProfilerStep#")}
        assert len(steps) == 2


@pytest.mark.slow
def test_schedule_longer_than_loop_is_bad_input(tmp_path: Path) -> None:
    proc = mpirun(1, small("--torch-profiler", "--torch-schedule", "wait=5,warmup=1,active=3"), tmp_path)
    assert proc.returncode == 2
    assert "torch_schedule: the schedule needs 9 steps, only 6 are run" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-p", "float8"], "field 'precision': 'float8' is not one of: 'float32', 'bfloat16', 'float16'"),
        (["-s", "15"], "sequence_length: 15 is not divisible by the 2 ranks"),
        (["-d", "9"], "hidden_dim: 9 is not divisible by the 2 ranks"),
    ],
)
def test_bad_input_exit_2_on_every_rank(tmp_path: Path, argv: list[str], message: str) -> None:
    proc = mpirun(2, small(*argv), tmp_path, PYTHONPROFILEIMPORTTIME="1")
    assert proc.returncode == 2
    assert proc.stderr.count(f"error: seqpar: {message}") == 2, proc.stderr
    # refused before torch loads: the ranks' import profiles (-X importtime) name hpcprof's modules, not torch
    assert re.search(r"\| +hpcprof\.workloads\.ranks$", proc.stderr, re.M), proc.stderr
    assert not re.search(r"\| +torch$", proc.stderr, re.M), proc.stderr


@pytest.mark.slow
def test_bench_command_and_results_dir(tmp_path: Path) -> None:
    out = tmp_path / "elsewhere"
    cmd = [str(MPIEXEC), "-n", "2", str(BIN / "hpcprof"), "bench", "seqpar", *small("--results-dir", str(out))]
    proc = subprocess.run(cmd, cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "seqpar.json").read_text())["config"]["world_size"] == 2
    bad = subprocess.run(
        [str(BIN / "hpcprof"), "bench", "seqpar", "-p", "half"], env=clean_env(), capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "precision" in bad.stderr


@pytest.mark.slow
def test_torchrun_without_mpi(tmp_path: Path) -> None:
    cmd = [str(BIN / "torchrun"), "--nproc-per-node", "2", "-m", "hpcprof.workloads.seqpar", *small("--check")]
    proc = subprocess.run(cmd, cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "results" / "seqpar.json").read_text())
    assert result["versions"]["launcher"] == "torchrun" and result["config"]["world_size"] == 2
    assert result["versions"]["mpi"] is None


def test_launch_argv_round_trip() -> None:
    from hpcprof.workloads import seqpar

    args = validate(seqpar.SeqparArgs, {"sequence_length": 4608, "precision": "bfloat16", "check": True,
                                        "profile_iterations": "2:5"}, "seqpar")
    argv = seqpar.launch_argv(args, "/usr/bin/python3")
    assert argv[:3] == ["/usr/bin/python3", "-m", "hpcprof.workloads.seqpar"]
    assert argv[3:] == ["--sequence-length", "4608", "--precision", "bfloat16", "--check", "--profile-iterations", "2:5"]
    assert seqpar.parse_args(argv[3:]) == args


def test_args_reject_unknown_and_late_window() -> None:
    from hpcprof.workloads import seqpar

    with pytest.raises(UserError, match="extra_field"):
        validate(seqpar.SeqparArgs, {"extra_field": 1}, "seqpar")
    with pytest.raises(ValueError, match="profile_iterations end 30 is past iterations=18"):
        seqpar.SeqparArgs(profile_iterations="10:30")
