"""The nsys part of `hpcprof collect` (the exports of a run, each rank's tables, the cross-rank
reduce: the registry `collect` runs in its workers, run here in one process) on a run directory
holding the H200 seqpar exports."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from hpcprof.analysis.collector import CollectContext
from hpcprof.analysis.registry import collector
from hpcprof.core.errors import Problem

KERN_SUM_TOTALS = {0: 43_530_292, 1: 6_906_115}   # Σ Total Time of the gold cuda_gpu_kern_sum per rank


@pytest.fixture
def run_dir(fixtures_dir: Path, tmp_path: Path) -> Path:
    for rank in (0, 1):
        dst = tmp_path / f"rank{rank}.sqlite"
        shutil.copy(fixtures_dir / "nsys" / "h200_seqpar_bf16" / f"rank{rank}.sqlite", dst)
    return tmp_path


def _ctx(run_dir: Path, files: list[Path], log: list[str],
         problems: list[Problem] | None = None) -> CollectContext:
    texts = [str(f) for f in files]
    return CollectContext(run_dir=run_dir, tool="nsys", files=texts, rank_of={f: i for i, f in enumerate(texts)},
                          work_dir=run_dir / "work", log=log.append,
                          problem=(problems if problems is not None else []).append)


def collect_nsys(ctx: CollectContext, nsys: str | None = None) -> dict[str, pd.DataFrame]:
    """Map every export of the run through nsys's ToolCollector in rank order, then reduce."""
    tool = collector("nsys", {"nsys": nsys} if nsys else {})
    per_file: dict[str, list[pd.DataFrame]] = {}
    for path, rank in sorted(tool.inputs(ctx).items(), key=lambda item: item[1]):
        for name, df in tool.analyse_file(Path(path), rank).items():
            per_file.setdefault(name, []).append(df)
    out = {name: pd.concat(parts, ignore_index=True) for name, parts in per_file.items()}
    out.update(tool.reduce(out.get, ctx.log))
    return out


def _check_tables(out: dict[str, pd.DataFrame]) -> None:
    kern = out["cuda_gpu_kern_sum"]
    assert kern.groupby("rank")["Total Time (ns)"].sum().to_dict() == KERN_SUM_TOTALS
    assert {"cuda_api_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum", "nvtx_sum", "osrt_sum", "nccl",
            "overlap", "phases"} <= set(out)
    for name in ("cuda_api_sum", "nvtx_sum", "osrt_sum"):
        assert sorted(out[name]["rank"].unique()) == [0, 1]
    nccl = out["nccl"]
    assert nccl[nccl["scope"] == "all"].set_index("collective")["count"].to_dict() == {"AllGather": 10,
                                                                                       "ReduceScatter": 10}
    assert out["overlap"]["rank"].tolist() == [0, 1]


def test_collect_sqlite_files(run_dir: Path) -> None:
    files = [run_dir / "rank0.sqlite", run_dir / "rank1.sqlite"]
    log: list[str] = []
    out = collect_nsys(_ctx(run_dir, files, log))
    _check_tables(out)
    assert all(not df.attrs for df in out.values())
    assert sorted(p.name for p in run_dir.iterdir()) == ["rank0.sqlite", "rank1.sqlite"]


def test_collect_exports_nsys_rep_with_the_site_nsys(run_dir: Path) -> None:
    """A .nsys-rep is exported with the configured nsys (here a stand-in that copies the export)."""
    (run_dir / "rank1.sqlite").rename(run_dir / "rank1.export-src")
    rep = run_dir / "rank1.nsys-rep"
    rep.write_bytes(b"not read by the stand-in")
    fake = run_dir / "fake-nsys"
    fake.write_text('#!/bin/sh\n# nsys export -t sqlite --force-overwrite true -o OUT IN\n'
                    f'[ "$1 $2 $3" = "export -t sqlite" ] || exit 3\ncp "{run_dir / "rank1.export-src"}" "$7"\n')
    fake.chmod(0o755)
    log: list[str] = []
    out = collect_nsys(_ctx(run_dir, [run_dir / "rank0.sqlite", rep], log), nsys=str(fake))
    _check_tables(out)
    assert (run_dir / "work" / "rank1.sqlite").exists()


def test_collect_without_nsys_goes_on_with_sqlite_files(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(run_dir))                  # no nsys anywhere
    rep = run_dir / "rank2.nsys-rep"
    rep.write_bytes(b"")
    log: list[str] = []
    problems: list[Problem] = []
    out = collect_nsys(_ctx(run_dir, [run_dir / "rank0.sqlite", run_dir / "rank1.sqlite", rep], log,
                            problems=problems))
    _check_tables(out)
    assert problems == [Problem(rep, problems[0].reason)] and "no nsys executable found" in problems[0].reason


def _all_rows(nccl: pd.DataFrame) -> pd.DataFrame:
    columns = ["collective", "count", "total_ns", "mean_ns", "min_ns", "max_ns", "slowest_rank", "slowest_total_ns"]
    return nccl[nccl["scope"] == "all"][columns].reset_index(drop=True)


def test_nccl_across_ranks_is_one_reduction_for_the_cli_and_collect(run_dir: Path) -> None:
    """`hpcprof nsys nccl` (file by file through collect's engine) and collect's nsys_nccl table
    reduce the same per-rank rows with the one function: equal rows across ranks, even where the
    old collect rounding (Python's round) and the CLI's (pandas) differed in the last digit."""
    from hpcprof.tools.nsys.analysis import distributed as dist
    from hpcprof.tools.nsys.analysis.cli import _analyse_one_at_a_time
    from hpcprof.tools.nsys.analysis.collect import NsysCollector

    files = (run_dir / "rank0.sqlite", run_dir / "rank1.sqlite")
    cli, failures = _analyse_one_at_a_time(files, [0, 1], dist.nccl_per_rank, dist.nccl_across_ranks)
    assert failures == 0 and cli is not None
    per = cli[cli["scope"] == "rank"].copy()
    per.insert(2, "window", "capture")                           # collect's per-rank rows carry their window
    collected = NsysCollector().reduce({"nccl": per}.get, print)["nccl"]
    pd.testing.assert_frame_equal(_all_rows(collected), _all_rows(cli))
    assert set(collected.loc[collected["scope"] == "all", "window"]) == {"capture"}
    assert _all_rows(cli)["count"].tolist() == [10, 10]         # AllGather, ReduceScatter: 5 per rank

    # 43,530,002 ns over 40 calls = 1,088,250.05 ns: half to even gives 1,088,250.0 (Python's
    # round of the float gave 1,088,250.1 in the old collect reduce, the CLI 1,088,250.0)
    crafted = pd.DataFrame({"scope": "rank", "rank": [0, 1], "window": "timed", "collective": "AllReduce",
                            "count": [20, 20], "total_ns": [20_000_001, 23_530_001], "mean_ns": [1e6, 1176500.0],
                            "min_ns": [1, 2], "max_ns": [3, 4]})
    collected = _all_rows(NsysCollector().reduce({"nccl": crafted}.get, print)["nccl"])
    from_cli = _all_rows(dist.nccl_across_ranks(crafted.drop(columns="window")))
    pd.testing.assert_frame_equal(collected, from_cli)
    assert collected.loc[0, "mean_ns"] == 1_088_250.0 and collected.loc[0, "slowest_rank"] == 1


def _same_rows(got: pa.Table, expected: pa.Table) -> bool:
    """Equal tables; a table of no rows equal to another of no rows with the same column names (a
    file with no rows of its own in a joint pass has the types the other files' rows give)."""
    if not expected.num_rows:
        return not got.num_rows and got.column_names == expected.column_names
    return got.equals(expected)


@pytest.mark.slow
def test_a_joint_pass_gives_each_file_the_tables_of_its_own(fixtures_dir: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """analyse_batch's one pass over the activity of many exports (every distinct nsys export of the
    fixtures: seqpar, DDP, Echo, nsys-ai, fuser; and a run whose config names its window range, a
    pass of its own) gives each file the tables analyse_tables gives it alone, row for row; files of
    an unknown rank, a damaged export and one that is not there are analysed on their own, each
    with its own error; a repeated rank or path starts a new pass, which holds at most BATCH_BYTES."""
    from hpcprof.tools.nsys.analysis import collect

    exports = sorted(p for p in fixtures_dir.rglob("*.sqlite") if _is_nsys_export(p))
    assert len(exports) >= 20
    run = tmp_path / "run" / "profiles" / "nsys"
    run.mkdir(parents=True)
    (tmp_path / "run" / "config.json").write_text(json.dumps({"experiment": {"name": "w", "workload": {"kind": "command"},
        "profile": {"tool": "nsys", "window": {"nvtx": "matmul1"}}}, "site": {}, "sweep_point": {}}))
    for rank in (0, 1):
        shutil.copy(fixtures_dir / "nsys" / "h200_seqpar_bf16" / f"rank{rank}.sqlite", run / f"rank{rank}.sqlite")
    damaged = tmp_path / "rank900.sqlite"
    damaged.write_bytes((fixtures_dir / "nsys" / "h200_seqpar_bf16" / "rank0.sqlite").read_bytes()[:20_000])
    files = [(p, rank) for rank, p in enumerate(exports)]
    joint = len(files)
    files += [(run / "rank0.sqlite", 0), (run / "rank1.sqlite", 1)]
    files += [(exports[0], 3), (exports[1], -1), (damaged, 900), (tmp_path / "rank901.sqlite", 901)]
    groups = collect.joint_groups(files)     # a repeated rank starts a pass (with the damaged file)
    assert sorted(map(sorted, groups)) == [list(range(joint)), [joint, joint + 1], [joint + 2, joint + 4]]
    assert collect.joint_groups([(exports[2], 0), (exports[2], 1), (exports[3], 2)]) == [[1, 2]]  # a repeated path
    sizes = [path.stat().st_size for path in exports[:6]]
    with monkeypatch.context() as patched:                                   # a pass holds at most BATCH_BYTES
        patched.setattr(collect, "BATCH_BYTES", sizes[0] + sizes[1])
        capped = collect.joint_groups([(path, rank) for rank, path in enumerate(exports[:6])])
    assert all(sum(sizes[i] for i in group) <= sizes[0] + sizes[1] for group in capped) and [0, 1] in capped

    expected: list[dict[str, pa.Table] | Exception] = []
    for path, rank in files:
        try:
            expected.append(collect.analyse_tables(path, rank))
        except Exception as exc:
            expected.append(exc)
    alone: list[tuple[Path, int]] = []
    analyse_tables = collect.analyse_tables
    monkeypatch.setattr(collect, "analyse_tables", lambda path, rank, **kw: alone.append((path, rank)) or
                        analyse_tables(path, rank, **kw))
    got = collect.analyse_batch(files)
    # on their own: each file whose analysis fails (an export with no GPU activity, 900, 901), the
    # unknown rank, and the damaged file's partner in its pass
    assert alone == [f for i, (f, e) in enumerate(zip(files, expected, strict=True))
                     if isinstance(e, Exception) or f[1] < 0 or i == joint + 2]
    assert len(alone) == 5
    for path, tables, want in zip(files, got, expected, strict=True):
        if isinstance(want, Exception):
            assert type(tables) is type(want) and str(tables) == str(want), path
            continue
        assert isinstance(tables, dict) and list(tables) == list(want), path
        for name, table in want.items():
            assert _same_rows(tables[name], table), (path, name)
    windows = [t["window"]["window"].to_pylist() for t in got[joint:joint + 2] if isinstance(t, dict)]
    assert windows == [["nvtx:matmul1"], ["nvtx:matmul1"]]
    assert sum(t["kernels"].num_rows for t in got[:joint] if isinstance(t, dict)) > 100
    assert all(isinstance(t, Exception) for t in got[-2:])


def test_collect_reads_each_export_on_its_share_of_the_cpus(fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The nsys collector opens each export with its `cores` (pool.cores_per_file: the file's share
    of the workers), alone or in a joint pass, so that its large tables are read in that many parts
    (Export.cpus; at least db.MIN_PARTS), not one per CPU of the machine in every worker."""
    from hpcprof.tools.nsys.analysis import collect
    from hpcprof.tools.nsys.stats.db import Export

    opened: list[int] = []

    class Recording(Export):
        def __init__(self, path: Path, cpus: int | None = None) -> None:
            super().__init__(path, cpus)
            opened.append(self.cpus)

    monkeypatch.setattr(collect, "Export", Recording)
    seqpar = fixtures_dir / "nsys" / "h200_seqpar_bf16"
    nsys = collector("nsys", cores=3)
    assert "kernels" in nsys.analyse_tables(seqpar / "rank0.sqlite", 0)
    got = nsys.analyse_batch([(seqpar / "rank0.sqlite", 0), (seqpar / "rank1.sqlite", 1)])
    assert all(isinstance(tables, dict) for tables in got)
    assert opened == [3, 3, 3]


def _is_nsys_export(path: Path) -> bool:
    import sqlite3

    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return bool(db.execute("SELECT 1 FROM sqlite_master WHERE name = 'StringIds'").fetchone())


def _edited_copy(source: Path, target: Path, *sql: str) -> Path:
    import sqlite3

    shutil.copy(source, target)
    target.chmod(0o644)
    with contextlib.closing(sqlite3.connect(target)) as db:
        for statement in sql:
            db.execute(statement)
        db.commit()
    return target


@pytest.mark.slow
def test_nvtx_ranges_of_many_exports_equal_each_alone(fixtures_dir: Path, tmp_path: Path) -> None:
    """nvtx.nvtx_range_columns_of, the NVTX read of collect's joint pass (numpy's steps once
    for many exports), gives each export exactly what nvtx_range_columns gives it alone: columns,
    dtypes, name codes and names, for each event-type set and layout (one layout, or both in one
    pass), the exports in either order.
    The exports: every distinct nsys export of the fixtures, copies whose NVTX domains were
    edited (a second, earlier creation of a domain; a domain row with an end; a range in a domain
    no process created), one without NVTX_EVENTS and one without StringIds, whose errors are their
    own."""
    import numpy as np

    from hpcprof.tools.nsys.stats.db import Export
    from hpcprof.tools.nsys.stats.nvtx import nvtx_range_columns, nvtx_range_columns_of
    from hpcprof.tools.nsys.stats.schema import NVTX_PUSHPOP, NVTX_STARTEND, OLD

    seqpar = fixtures_dir / "nsys" / "h200_seqpar_bf16" / "rank0.sqlite"
    domain_row = "(SELECT min(rowid) FROM NVTX_EVENTS WHERE eventType = 75)"
    paths = sorted(p for p in fixtures_dir.rglob("*.sqlite") if _is_nsys_export(p)) + [
        _edited_copy(seqpar, tmp_path / "earlier.sqlite",
                     "INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, domainId, text) SELECT start - 5, "
                     f"NULL, 75, globalTid, domainId, 'EARLIER' FROM NVTX_EVENTS WHERE rowid = {domain_row}"),
        _edited_copy(seqpar, tmp_path / "ended.sqlite", f"UPDATE NVTX_EVENTS SET end = start + 7 WHERE rowid = {domain_row}"),
        _edited_copy(seqpar, tmp_path / "uncreated.sqlite",
                     "UPDATE NVTX_EVENTS SET domainId = 9 WHERE rowid = (SELECT max(rowid) FROM NVTX_EVENTS "
                     "WHERE eventType = 59)"),
        _edited_copy(seqpar, tmp_path / "no_nvtx.sqlite", "DROP TABLE NVTX_EVENTS"),
        _edited_copy(seqpar, tmp_path / "no_strings.sqlite", "DROP TABLE StringIds")]
    with contextlib.ExitStack() as stack:
        exports = [stack.enter_context(Export(path)) for path in paths]
        with_domains = sum(bool(e.has("NVTX_EVENTS") and e.sql_rows("SELECT 1 FROM NVTX_EVENTS WHERE eventType = 75"))
                           for e in exports)
        assert len(exports) >= 25 and with_domains >= 10
        compared = unresolved = 0
        for types in (NVTX_PUSHPOP + NVTX_STARTEND, NVTX_PUSHPOP, NVTX_STARTEND):
            for times in (True, False):
                alone: dict[str, list[object]] = {OLD: [], "new": []}
                for layout, results in alone.items():
                    for export in exports:
                        try:
                            results.append(nvtx_range_columns(export, types, layout, times))
                        except Exception as exc:      # compared by type and message
                            results.append(exc)
                    assert isinstance(results[-2], Exception)         # no NVTX_EVENTS
                    unresolved += isinstance(results[-1], Exception)  # no StringIds (where it has ranges)
                for order in (1, -1):
                    for layouts in ((OLD,), ("new",), (OLD, "new")):    # one layout, or both in one pass
                        joint = nvtx_range_columns_of(exports[::order], types, layouts, times)
                        assert list(joint) == list(layouts)
                        for layout in layouts:
                            for export, one, got in zip(exports, alone[layout], joint[layout][::order], strict=True):
                                if isinstance(one, Exception):
                                    assert type(got) is type(one) and str(got) == str(one), export.path
                                    continue
                                assert not isinstance(got, Exception), export.path
                                (columns, names), (joint_columns, joint_names) = one, got  # type: ignore[misc]
                                assert list(joint_columns) == list(columns), export.path
                                for name, values in columns.items():
                                    assert joint_columns[name].dtype == values.dtype, (export.path, name)
                                    assert np.array_equal(joint_columns[name], values), (export.path, name, layout)
                                assert joint_names.tolist() == names.tolist(), (export.path, layout)
                                compared += 1
        assert compared >= 12 * 4 * 25 and unresolved >= 8


def _count_tie(source: Path, target: Path) -> Path:
    """A copy of `source` where the kernels of two names have equal totals, the name first in text
    order with more instances (cuda_gpu_kern_sum puts the other first: count ascending)."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(source)) as db:
        first, second, third = [i for _, i in sorted(db.execute(
            "SELECT s.value, s.id FROM StringIds s WHERE s.id IN (SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL)"))][:3]
    kernels = "CUPTI_ACTIVITY_KIND_KERNEL"
    return _edited_copy(source, target, f"UPDATE {kernels} SET end = start + 200 WHERE demangledName = {first}",
                        f"UPDATE {kernels} SET end = start + 250 WHERE demangledName = {second}",
                        f"UPDATE {kernels} SET demangledName = {third} WHERE rowid = "
                        f"(SELECT max(rowid) FROM {kernels} WHERE demangledName = {second})")


@pytest.mark.slow
def test_summaries_of_many_exports_equal_the_columnar_engine_on_each(fixtures_dir: Path, tmp_path: Path) -> None:
    """summaries.summaries_of, collect's per-rank summary reports of many exports at once, gives
    each export exactly the tables the columnar engine gives it alone (run_table): columns, dtypes,
    values to the bit, row order; a report whose data an export lacks is absent, an export without
    StringIds fails alone. The exports, together in either order and each alone: every distinct nsys
    export of the fixtures, copies without StringIds, NVTX_EVENTS, OSRT_API or memcpys, and
    generated exports (tests/differential/nsys_exports.py: `.x5` averages, standard deviations on a
    rounding tie, equal totals and counts across groups, NULL names)."""
    import sys

    import numpy as np

    from hpcprof.tools.nsys.stats.db import Export
    from hpcprof.tools.nsys.stats.schema import MissingData, NsysInputError
    from hpcprof.tools.nsys.stats.stats import SUMMARY_REPORTS, run_table
    from hpcprof.tools.nsys.stats.summaries import summaries_of

    sys.path.insert(0, str(Path(__file__).parent / "differential"))
    from nsys_exports import PROJECTION_SEEDS, TIE_SEEDS, derive

    seqpar = fixtures_dir / "nsys" / "h200_seqpar_bf16" / "rank0.sqlite"
    generated = tmp_path / "generated"
    paths = sorted(p for p in fixtures_dir.rglob("*.sqlite") if _is_nsys_export(p)) + [
        _edited_copy(seqpar, tmp_path / "no_strings.sqlite", "DROP TABLE StringIds"),
        _edited_copy(seqpar, tmp_path / "no_nvtx.sqlite", "DROP TABLE NVTX_EVENTS"),
        _edited_copy(seqpar, tmp_path / "no_osrt.sqlite", "DROP TABLE OSRT_API"),
        _edited_copy(seqpar, tmp_path / "no_memory.sqlite", "DROP TABLE CUPTI_ACTIVITY_KIND_MEMSET"),
        _count_tie(seqpar, tmp_path / "count_tie.sqlite")] + [
        derive(seed, fixtures_dir, generated) for first in (0, TIE_SEEDS, PROJECTION_SEEDS)
        for seed in range(first, first + 12)]
    with contextlib.ExitStack() as stack:
        exports = [stack.enter_context(Export(path)) for path in paths]
        alone: list[dict[str, object]] = []
        for export in exports:
            wanted: dict[str, object] = {}
            for name in SUMMARY_REPORTS:
                try:
                    wanted[name] = run_table(export, name)
                except (MissingData, NsysInputError) as exc:
                    wanted[name] = exc
            alone.append(wanted)
        compared = absent = 0
        for group in (list(range(len(exports))), list(reversed(range(len(exports)))),
                      *([i] for i in range(len(exports)))):
            reports, failed = summaries_of([exports[i] for i in group])
            for at, i in enumerate(group):
                if exports[i].path.name == "no_strings.sqlite":
                    assert "StringIds table is missing" in str(failed[at]), failed
                    continue
                assert at not in failed, (exports[i].path, failed[at])
                for name in SUMMARY_REPORTS:
                    want, report = alone[i][name], reports[name]
                    if isinstance(want, Exception):
                        assert isinstance(want, MissingData) and at not in report.present, (exports[i].path, name)
                        absent += 1
                        continue
                    assert at in report.present, (exports[i].path, name)
                    rows = np.flatnonzero(report.export == at)
                    assert report.table.formats == want.formats and report.table.null == want.null  # type: ignore[attr-defined]
                    assert list(report.table.columns) == list(want.columns), (exports[i].path, name)  # type: ignore[attr-defined]
                    for column, values in want.columns.items():  # type: ignore[attr-defined]
                        got = report.table.columns[column][rows]
                        assert got.dtype == values.dtype, (exports[i].path, name, column)
                        assert got.tolist() == values.tolist() if got.dtype == object else \
                            got.tobytes() == values.tobytes(), (exports[i].path, name, column)
                    compared += 1
        assert compared >= 3 * 250 and absent >= 3 * 20, (compared, absent)
