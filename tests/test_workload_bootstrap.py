"""Rank discovery, schedules, statistics and flag round trips of the workloads (no launcher needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcprof.errors import UserError
from hpcprof.workloads import bootstrap, options, seqpar, timing

LAUNCHER_VARS = [*bootstrap.GLOBAL_RANK_VARS, *bootstrap.LOCAL_RANK_VARS, *bootstrap.MPI_MARKERS,
                 "HPCPROF_RANK", "HPCPROF_LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "SLURM_NTASKS"]


@pytest.fixture
def bare_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_single_process_layout(bare_env: pytest.MonkeyPatch) -> None:
    assert bootstrap.discover_layout() == bootstrap.RankLayout(0, 1, 0, "single")


def test_torchrun_layout(bare_env: pytest.MonkeyPatch) -> None:
    for name, value in {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "n1"}.items():
        bare_env.setenv(name, value)
    assert bootstrap.discover_layout() == bootstrap.RankLayout(3, 4, 1, "torchrun")


def test_srun_layout_and_wrapper_local_rank_wins(bare_env: pytest.MonkeyPatch) -> None:
    for name, value in {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "HPCPROF_LOCAL_RANK": "2"}.items():
        bare_env.setenv(name, value)
    assert bootstrap.discover_layout() == bootstrap.RankLayout(5, 8, 2, "srun")


def test_local_rank_order_prefers_launcher_over_slurm(bare_env: pytest.MonkeyPatch) -> None:
    bare_env.setenv("SLURM_LOCALID", "0")  # inherited by every rank of an mpiexec inside a Slurm job
    bare_env.setenv("MPI_LOCALRANKID", "3")
    assert bootstrap.local_rank_from_env() == 3


@pytest.mark.parametrize(
    ("nodelist", "host"),
    [("nid[001-004,010],gpu7", "nid001"), ("x3005c0s13b0n0", "x3005c0s13b0n0"), ("gpu[7,9]", "gpu7"), ("a,b", "a")],
)
def test_first_slurm_host(nodelist: str, host: str) -> None:
    assert bootstrap.first_slurm_host(nodelist) == host


def test_cpu_device_and_results_dir(bare_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert bootstrap.choose_device("cpu", 3, "reverse").type == "cpu"
    bare_env.delenv("HPCPROF_RUN_DIR", raising=False)
    assert bootstrap.results_dir(None) == Path("results")
    bare_env.setenv("HPCPROF_RUN_DIR", str(tmp_path))
    assert bootstrap.results_dir(None) == tmp_path / "results"
    assert bootstrap.results_dir(Path("x")) == Path("x")


def test_schedule_parsing() -> None:
    assert timing.parse_schedule("wait=1,warmup=1,active=3,repeat=1") == {
        "skip_first": 0, "wait": 1, "warmup": 1, "active": 3, "repeat": 1
    }
    assert timing.schedule_length(timing.parse_schedule("skip_first=2,wait=1,active=2,repeat=2")) == 8
    for bad in ("wait=x", "sleep=1", "active=0", "wait"):
        with pytest.raises(ValueError):
            timing.parse_schedule(bad)


def test_schedule_source_named_in_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCPROF_TORCH_SCHEDULE", "wait=oops")
    with pytest.raises(UserError, match="HPCPROF_TORCH_SCHEDULE: bad item 'wait=oops'"):
        timing.check_schedule_fits("seqpar", None, 10)


def test_phase_stats_across_ranks() -> None:
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
    args = seqpar.SeqparArgs(check=False, torch_gzip=True)
    assert options.to_argv(args) == ["--no-check", "--torch-gzip"]
    assert seqpar.parse_args(options.to_argv(args)) == args
