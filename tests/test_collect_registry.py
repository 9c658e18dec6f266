"""collect's collectors: every tool of the profiler table with a collector implements the
ToolCollector interface, and a new tool's collect is one ToolCollector class named by its entry in
the table — here a CSV-per-rank tool run through collect's real map (parts on disk, the cache) and
reduce (Parquet in, Parquet out). (tests/test_profiler_extension.py adds a whole tool the way a package does.)"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from hpcprof import profilers
from hpcprof.analysis import registry
from hpcprof.analysis.collector import CollectContext, Log, ReadTable, Reducer, ToolCollector
from hpcprof.run.ranks import rank_from_filename


class CsvCollector(ToolCollector):
    """A stand-in profiler: each rank's file is a CSV of kernel durations."""

    def analyse_file(self, path: Path, rank: int) -> dict[str, pd.DataFrame]:
        df = pd.read_csv(path)
        if list(df.columns) != ["name", "ns"]:
            raise ValueError(f"{path.name}: not a kernel CSV")
        df.insert(0, "rank", rank)
        return {"kernels": df}

    def reducers(self) -> tuple[Reducer, ...]:
        return (kernel_totals,)


def kernel_totals(read: ReadTable, log: Log) -> dict[str, pd.DataFrame]:
    kernels = read("kernels")
    assert kernels is not None
    log(f"csv: {len(kernels)} kernels")
    return {"total": kernels.groupby("name", as_index=False)["ns"].sum()}


@pytest.mark.parametrize("tool", sorted(name for name, p in profilers.BUILTIN.items() if p.collector))
def test_every_registered_tool_is_a_tool_collector(tool: str) -> None:
    found = registry.collector(tool, {"ncu": "/site/ncu"})
    assert isinstance(found, ToolCollector) and found.tool_paths == {"ncu": "/site/ncu"}
    assert type(found).analyse_file is not ToolCollector.analyse_file


def test_a_new_tool_is_one_class_and_one_table_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcprof.collect import InProcess, map_files, reduce_parts
    from hpcprof.run.results import read_table

    monkeypatch.setitem(profilers.BUILTIN, "csv", profilers.Profiler("csv", collector=f"{__name__}:CsvCollector"))
    profiles = tmp_path / "profiles" / "csv"
    profiles.mkdir(parents=True)
    (profiles / "rank0.csv").write_text("name,ns\nA,10\nB,5\n")
    (profiles / "rank_1.csv").write_text("name,ns\nA,7\n")
    (profiles / "rank2.csv").write_text("\x00 not a csv")
    files = sorted(str(path) for path in profiles.iterdir())
    ctx = CollectContext(run_dir=tmp_path, tool="csv", files=files,
                         rank_of={f: rank_from_filename(f) or 0 for f in files}, work_dir=tmp_path / "derived" / "csv")
    inputs = registry.collector("csv").inputs(ctx)
    problems: list[object] = []
    notes: list[str] = []
    mapped = map_files("csv", inputs, tmp_path, InProcess(), notes.append, problems.append)
    written = reduce_parts("csv", tmp_path, mapped, InProcess(), notes.append)
    assert sorted(written) == ["csv_kernels", "csv_total"]
    assert [getattr(p, "path", None) for p in problems] == [profiles / "rank2.csv"]   # the damaged file only
    assert read_table(tmp_path, "csv_total").set_index("name")["ns"].to_dict() == {"A": 17, "B": 5}
    assert read_table(tmp_path, "csv_kernels")["rank"].tolist() == [0, 0, 1]
    assert "csv: 3 kernels" in notes


class RewritingCollector(CsvCollector):
    """Its reducer replaces `kernels` (sorted by duration) unless told to fail or to pass."""

    rewritten = ("kernels",)

    def reducers(self) -> tuple[Reducer, ...]:
        return (slowest_first,)


class UndeclaredCollector(RewritingCollector):
    """The same reducer, its replacing `kernels` not declared."""

    rewritten = ()


def slowest_first(read: ReadTable, log: Log) -> dict[str, pd.DataFrame]:
    kernels = read("kernels")
    assert kernels is not None
    if (kernels["name"] == "fail").any():
        raise RuntimeError("reducer failed")
    if (kernels["name"] == "pass").any():
        return {}
    return {"kernels": kernels.sort_values("ns", ascending=False, ignore_index=True)}


#: the collect of that test, in a process of its own: its workers are forked from it only while it runs no
#: other thread (engine.worker_context), and only forked ones see the collector registered here
REWRITE = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from hpcprof import profilers
from hpcprof import profilers
from hpcprof.collect import map_files, reduce_parts
from hpcprof.core.pool import make_executor
from hpcprof.run.results import read_table

run, case, workers = Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
tool = "UndeclaredCollector" if case == "undeclared" else "RewritingCollector"
profilers.BUILTIN["csv"] = profilers.Profiler("csv", collector=f"test_collect_registry:{tool}")
files = {str(run / "profiles" / f"rank{rank}.csv"): rank for rank in range(9)}
executor, _ = make_executor(workers)
try:
    mapped = map_files("csv", files, run, executor, print, print)
    try:
        out = {"written": reduce_parts("csv", run, mapped, executor, print)}
    except RuntimeError as exc:
        out = {"error": str(exc)}
finally:
    executor.shutdown()
kernels = read_table(run, "csv_kernels")
print(json.dumps({**out, "ns": None if kernels is None else kernels["ns"].tolist()}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("case", ["rewritten", "passed", "failed", "undeclared"])
def test_a_rewritten_table_is_the_reducers_else_the_concatenated_one(tmp_path: Path, workers: int, case: str) -> None:
    """With several workers the cross-rank steps read the slices' pieces while the other tables are
    joined; a table a step replaces (ToolCollector.rewritten) is then the step's, and where the step
    wrote none (or failed: its error comes after) the ranks' rows concatenated, as with one worker.
    A step that replaces a table its collector does not name (joined at the same time) is an error
    with several workers."""
    import json
    import subprocess
    import sys

    profiles = tmp_path / "profiles"
    profiles.mkdir()
    marker = {"rewritten": "A", "passed": "pass", "failed": "fail", "undeclared": "A"}[case]
    for rank in range(9):
        (profiles / f"rank{rank}.csv").write_text(f"name,ns\n{marker},{rank}\nB,{10 * rank}\n")
    proc = subprocess.run([sys.executable, "-c", REWRITE, str(Path(__file__).parent), str(tmp_path), case, str(workers)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    concatenated = [ns for rank in range(9) for ns in (rank, 10 * rank)]
    if case == "failed":
        assert out["error"] == "reducer failed" and out["ns"] == concatenated
    elif case == "undeclared" and workers > 1:     # which table is left is chance: the error says so
        assert out["error"].startswith("a cross-rank step of csv replaced csv_kernels, which its collector's")
    else:   # undeclared: harmless with one worker (one step after another)
        replaced = case in ("rewritten", "undeclared")
        assert out["written"] == ["csv_kernels"]
        assert out["ns"] == (sorted(concatenated, reverse=True) if replaced else concatenated)
    assert not (tmp_path / "derived" / "csv" / "pieces").exists() and not list((tmp_path / "derived" / "csv").glob(".*"))
