"""`hpcprof trace ...` commands and the torch collector."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from hpcprof.cli import main
from hpcprof.core.safe_text import csv_frame
from hpcprof.tools.torch.analysis import analyses as A
from hpcprof.tools.torch.analysis.collect import TorchCollector, analyse_file
from hpcprof.tools.torch.analysis.load import TraceError, load_traces


@pytest.fixture(scope="module")
def trace_filter(fixtures_dir: Path) -> Path:
    return fixtures_dir / "hta" / "trace_filter"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["trace", *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("command, analysis", [
    (["temporal"], A.temporal_breakdown),
    (["overlap"], A.comm_comp_overlap),
    (["idle"], A.idle_time_breakdown),
    (["idle", "--stats"], A.idle_interval_stats),
    (["launch"], A.kernel_launch_stats),
    (["kernels"], A.kernel_breakdown),
    (["kernels", "--types"], A.kernel_type_breakdown),
])
def test_commands_print_the_analysis_for_all_ranks(command: list[str], analysis: Callable,
                                                   trace_filter: Path) -> None:
    code, out, err = run(*command, str(trace_filter), "--format", "csv")
    assert (code, err) == (0, "")
    expected = analysis(load_traces([trace_filter])[0])
    expected = expected if isinstance(expected, pd.DataFrame) else expected.frame()
    pd.testing.assert_frame_equal(pd.read_csv(io.StringIO(out)), expected, check_dtype=False)


@pytest.mark.parametrize("fixture", ["trace_filter", "ns_resolution_trace"])
def test_all_writes_pandas_csv_bytes_without_pandas(fixture: str, fixtures_dir: Path) -> None:
    """`trace all --format csv` writes each analysis from its numpy columns: the bytes pandas' to_csv
    of its DataFrame writes, in a process that never imports pandas."""
    folder = fixtures_dir / "hta" / fixture
    probe = ("import sys; from hpcprof.cli import main; main(sys.argv[1:], standalone_mode=False); "
             "print('pandas' in sys.modules, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe, "trace", "all", str(folder), "--format", "csv"],
                          capture_output=True, text=True, check=True)
    assert done.stderr == "False\n"
    expected = "".join(f"# {name}\n" + csv_frame(table.frame()).to_csv(index=False)
                       for name, table in A.all_analyses(load_traces([folder])[0]).items())
    assert done.stdout == expected


def test_json_and_table_formats(trace_filter: Path) -> None:
    code, out, _ = run("temporal", str(trace_filter), "--format", "json")
    assert code == 0 and [r["rank"] for r in json.loads(out)] == [0, 1]
    code, out, _ = run("overlap", str(trace_filter))
    assert code == 0 and "comp_comm_overlap_pctg" in out and "20.05" in out


def test_options_reach_the_analyses(trace_filter: Path) -> None:
    code, out, _ = run("idle", str(trace_filter), "--ranks", "1", "--streams", "7,84",
                       "--consecutive-kernel-delay", "5", "--format", "csv")
    df = pd.read_csv(io.StringIO(out))
    assert code == 0 and set(df["rank"]) == {1} and set(df["stream"]) == {7, 84}
    code, out, _ = run("kernels", str(trace_filter), "--num-kernels", "3", "--no-memory",
                       "--format", "csv")
    df = pd.read_csv(io.StringIO(out))
    assert code == 0 and "MEMORY" not in set(df["kernel_type"])
    assert df.groupby(["rank", "kernel_type"]).size().max() <= 4  # 3 kernels + others
    code, out, _ = run("launch", str(trace_filter), "--no-memory-events", "--format", "csv")
    assert code == 0 and len(pd.read_csv(io.StringIO(out))) < 1179
    code, out, _ = run("temporal", str(trace_filter), "--include-last-step", "--format", "csv")
    assert code == 0 and pd.read_csv(io.StringIO(out))["kernel_time(us)"].iloc[0] > 600058


def test_bad_files_are_reported_and_the_rest_analysed(tmp_path: Path, trace_filter: Path) -> None:
    truncated = tmp_path / "truncated.json.gz"
    truncated.write_bytes((trace_filter / "sampled_rank-1.json.gz").read_bytes()[:40_000])
    not_json = tmp_path / "notes.json"
    not_json.write_text("this is not a trace\n")
    cpu_only = tmp_path / "cpu_rank5.json"
    cpu_only.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2}]}))
    missing = tmp_path / "missing.json"
    good = trace_filter / "sampled_rank-0.json.gz"
    code, out, err = run("temporal", str(truncated), str(not_json), str(good), str(cpu_only),
                         str(missing), "--format", "csv")
    assert code == 2
    assert pd.read_csv(io.StringIO(out))["rank"].tolist() == [0]
    lines = err.strip().splitlines()
    assert len(lines) == 5 and lines[-1].startswith("Error: ")
    for path, reason in ((truncated, "truncated or corrupt gzip"),
                         (not_json, "not a Kineto JSON trace"),
                         (cpu_only, "no GPU events"), (missing, "cannot read")):
        assert sum(line.startswith(f"hpcprof: {path}: ") for line in lines) == 1
        assert reason in next(line for line in lines if str(path) in line)


def test_nothing_analysable_and_unknown_ranks(tmp_path: Path, trace_filter: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    code, out, err = run("overlap", str(bad))
    assert code == 2 and out == "" and "no trace could be analysed" in err
    code, out, err = run("overlap", str(trace_filter), "--ranks", "0,3-4")
    assert code == 2 and "ranks not found: [3, 4]" in err and "11.81" in out
    code, _, err = run("overlap", str(trace_filter), "--ranks", "x")
    assert code == 2 and "--ranks 'x'" in err


def test_collect_traces_per_file(tmp_path: Path, trace_filter: Path, fixtures_dir: Path) -> None:
    """`hpcprof collect`'s per-file trace analysis, ranks concatenated and reduced: HTA's numbers;
    a damaged trace is an error naming the file (collect then skips it, the run partial)."""
    files = sorted(trace_filter.glob("*.json.gz"))
    per_file = [analyse_file(path, rank) for rank, path in enumerate(files)]
    tables = {name: pd.concat([t[name] for t in per_file], ignore_index=True) for name in per_file[0]}
    tables.update(TorchCollector().reduce(tables.get, lambda line: None))
    hta = {"temporal", "overlap", "idle", "launch", "kernels", "kernel_types", "window", "iterations"}
    assert set(tables) == hta | {"window_kernels", "busbw", "critical_path_events", "critical_path", "critical_path_segments",
                           "idle_causes", "step_idle", "lines"}
    for name in hta | {"window_kernels", "critical_path_events"}:
        assert set(tables[name]["rank"]) == {0, 1}, name
    gold = json.loads((fixtures_dir / "hta" / "gold_hta" / "hta0.5.0_trace_filter.json")
                      .read_text())
    assert tables["overlap"].to_dict("records") == gold["trace_filter.comm_comp_overlap"]
    assert tables["temporal"]["idle_time_pctg"].tolist() == [53.56, 54.72]
    broken = tmp_path / "rank2.json.gz"
    broken.write_bytes(gzip.compress(b'{"traceEvents": ['))
    with pytest.raises(TraceError, match=str(broken)):
        analyse_file(broken, 2)
    bad = tmp_path / "x.json"
    bad.write_text("[]")
    with pytest.raises(TraceError):
        analyse_file(bad, 0)


@pytest.mark.slow
def test_named_deviations_are_options(trace_filter: Path, fixtures_dir: Path) -> None:
    """--instance-stats and --clamp-sub-us give what the library options give."""
    code, out, err = run("kernels", "--instance-stats", str(trace_filter), "--format", "csv")
    assert (code, err) == (0, "")
    expected = A.kernel_breakdown(load_traces([trace_filter])[0], instance_stats=True).frame()
    pd.testing.assert_frame_equal(pd.read_csv(io.StringIO(out)), expected, check_dtype=False)
    ns = fixtures_dir / "hta" / "ns_resolution_trace"
    code, out, err = run("idle", "--clamp-sub-us", str(ns), "--format", "csv")
    assert (code, err) == (0, "")
    expected = A.idle_time_breakdown(load_traces([ns], clamp_sub_us=True)[0]).frame()
    pd.testing.assert_frame_equal(pd.read_csv(io.StringIO(out)), expected, check_dtype=False)


@pytest.mark.slow
def test_workers_option_gives_the_same_output(fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--workers N of `trace all` and `trace critical-path` (a process per file, the rest as decode
    helpers) prints what one process prints; --workers 0 is refused with exit status 2."""
    from hpcprof.tools.torch.analysis import load

    monkeypatch.setattr(load, "PARALLEL_MIN_BYTES", 0)        # the fixtures are small: helpers all the same
    pair = fixtures_dir / "hta" / "h200_ddp_gpt2"
    for command in (["all"], ["critical-path"]):
        outputs = {w: run(*command, str(pair), "--format", "csv", "--workers", w) for w in ("1", "2", "5")}
        assert outputs["1"][0] == 0 and outputs["1"][1].count("\n") > 1
        assert outputs["2"] == outputs["5"] == outputs["1"], command
    code, _, err = run("all", str(pair), "--workers", "0")
    assert code == 2 and "--workers" in err


def test_default_workers_are_the_cpus_this_process_may_use(fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --workers, traces are loaded on the CPUs of the process's affinity (cpus.usable_cpus: a
    job's cpuset), not the machine's: 3 usable CPUs and one file give the file 2 decode helpers."""
    import subprocess
    import sys

    from hpcprof.tools.torch.analysis import load

    probe = "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); " \
            "from hpcprof.core.cpus import usable_cpus; print(usable_cpus(), os.cpu_count())"
    one, machine = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert one == "1" and int(machine) >= 1
    monkeypatch.setattr(load, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(load, "usable_cpus", lambda: 3)
    helpers: list[int] = []
    monkeypatch.setattr(load, "_load_wanted", lambda path, h, **kwargs: helpers.append(h))
    load.load_traces([fixtures_dir / "hta" / "h200_ddp_gpt2" / "rank0.pt.trace.json.gz"])
    assert helpers == [2]
