"""The critical path across ranks (hpcprof.analysis.critical_path and its nsys / Kineto readers).

Hand-built cases: a seqpar-like schedule (all-gather -> matmul1 -> matmul2 -> reduce-scatter per
iteration) simulated on 3 ranks with known delays, where a collective starts on each rank when that
rank is ready and ends on every rank at the same moment; written as nsys-schema SQLite exports (each
rank on its own clock) and as Kineto traces. The tables must name the delayed rank, its phase and the
delay to the nanosecond. Real 2xH200 fixtures: invariants, and values recomputed here with plain
sqlite3 / json.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from hpcprof.analysis import critical_path as core
from hpcprof.cli import main
from hpcprof.tools.nsys.analysis import collect as nsys_collect
from hpcprof.tools.nsys.analysis import critical_path as nsys_cp
from hpcprof.tools.nsys.analysis import distributed as dist
from hpcprof.tools.nsys.stats.db import Export
from hpcprof.tools.torch.analysis import collect as trace_collect
from hpcprof.tools.torch.analysis import critical_path as trace_cp

RANKS = 3
#: (phase, collective or None, GPU duration ns) of one iteration
SCHEDULE = [("allgather", "AllGather", 100_000), ("matmul1", None, 200_000), ("matmul2", None, 250_000),
            ("reduce_scatter", "ReduceScatter", 80_000)]
KERNELS = {"AllGather": "ncclDevKernel_AllGather_RING_LL", "ReduceScatter": "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL",
           "matmul1": "gemm_256x128", "matmul2": "gemm_192x192"}
MM2_DELAY = 123_457        # rank 1's matmul2 runs this much longer in timed iteration 1
HOST_DELAY = 50_000        # rank 2's host launches timed iteration 0's all-gather this much later
MM1_DELAY = 77_777         # rank 2's matmul1 runs this much longer in timed iteration 3
WARMUP_DELAY = 1_000_000   # rank 0's matmul1 in the warm-up iteration (outside the timed range)


def simulate(iterations: int = 5) -> list[list[dict]]:
    """Per rank, the GPU operations of one warm-up and `iterations - 1` timed iterations on a common
    clock: {iteration (-1 = warm-up), phase, collective, start, end}."""
    ready = [1_000_000] * RANKS
    ops: list[list[dict]] = [[] for _ in range(RANKS)]
    for it in range(-1, iterations - 1):
        for phase, coll, dur in SCHEDULE:
            starts = [ready[r] + (HOST_DELAY if (it, r, phase) == (0, 2, "allgather") else 0) for r in range(RANKS)]
            for r in range(RANKS):
                extra = MM2_DELAY if (it, r, phase) == (1, 1, "matmul2") else 0
                extra += MM1_DELAY if (it, r, phase) == (3, 2, "matmul1") else 0
                extra += WARMUP_DELAY if (it, r, phase) == (-1, 0, "matmul1") else 0
                end = max(starts) + dur if coll else starts[r] + dur + extra
                ops[r].append({"iteration": it, "phase": phase, "collective": coll, "start": starts[r], "end": end})
                ready[r] = end + 1_000
    return ops


def write_nsys_export(path: Path, rank: int, ops: list[dict], clock_offset: int) -> None:
    """A minimal nsys SQLite export (the real schema's columns that analyses read) of one rank whose
    clock reads `clock_offset` more than the common one: NVTX push/pop ranges warmup > iteration,
    timed > iteration > phase, one CUDA runtime launch per operation, 5 µs before it runs."""
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
            deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
            correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
            eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL,
            returnValue INTEGER NOT NULL);
        CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, text TEXT,
            globalTid INTEGER, textId INTEGER, domainId INTEGER);
    """)
    names = sorted(set(KERNELS.values())) + ["cudaLaunchKernel"]
    sid = {n: i for i, n in enumerate(names)}
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", list(enumerate(names)))
    pid = 4000 + rank
    gpid, gtid = pid << 24, (pid << 24) | pid
    nvtx, first_launch, last_launch = [], {}, {}
    for corr, op in enumerate(ops, start=1):
        start, end = op["start"] + clock_offset, op["end"] + clock_offset
        launch = start - 5_000
        name = KERNELS[op["collective"] or op["phase"]]
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,0,7,?,?,?,?)",
                    (start, end, rank, corr, gpid, sid[name], sid[name]))
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,0,?,?,?,0)",
                    (launch, launch + 2_000, gtid, corr, sid["cudaLaunchKernel"]))
        nvtx.append((launch - 100, launch + 2_100, op["phase"]))
        first_launch.setdefault(op["iteration"], launch)
        last_launch[op["iteration"]] = launch
    for it, lo in first_launch.items():
        nvtx.append((lo - 200, last_launch[it] + 2_200, "iteration"))
    nvtx.append((first_launch[-1] - 300, last_launch[-1] + 2_300, "warmup"))
    nvtx.append((first_launch[0] - 300, last_launch[max(last_launch)] + 2_300, "timed"))
    con.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, ?, ?, NULL, 0)",
                    [(s, e, text, gtid) for s, e, text in nvtx])
    con.commit()
    con.close()


@pytest.fixture(scope="module")
def hand_exports(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("critical_path_nsys")
    paths = []
    for rank, ops in enumerate(simulate()):
        paths.append(out / f"rank{rank}.sqlite")
        write_nsys_export(paths[-1], rank, ops, clock_offset=rank * 1_000_003 + 17)  # every rank its own clock
    return paths


def expected_rows() -> pd.DataFrame:
    """The answer of the simulated schedule, by hand: iteration 0 waits for rank 2's host before the
    all-gather, iteration 1 for rank 1's matmul2 before the reduce-scatter, iteration 2 waits for nobody
    (every collective of it starts together, so no rank is later: the first one, rank 0), iteration 3
    for rank 2's matmul1 (not matmul2, which ran just before the reduce-scatter but took no longer)."""
    length = sum(d for _, _, d in SCHEDULE) + 3_000      # and the 1 µs launch gap after each of 3 operations
    return pd.DataFrame({
        "iteration": [0, 1, 2, 3],
        "iteration_ns": [float(length), float(length + MM2_DELAY), float(length), float(length + MM1_DELAY)],
        "collective": ["AllGather", "ReduceScatter", "AllGather", "ReduceScatter"],
        "critical_rank": [2, 1, 0, 2],
        "held_by": [core.IDLE, "matmul2", core.IDLE, "matmul1"],
        "held_ns": [float(HOST_DELAY), float(MM2_DELAY), 0.0, float(MM1_DELAY)],
        "waiting_ranks": [2, 2, 0, 2],
    }).astype({"collective": object, "held_by": object})


def test_hand_built_nsys_exports_name_the_delayed_rank_phase_and_delay(hand_exports: list[Path]) -> None:
    events = pd.concat([nsys_cp.rank_events(dist.load_activity([Export(p)], {str(p): r}))
                        for r, p in enumerate(hand_exports)], ignore_index=True)
    # the warm-up iteration is outside `timed`: 4 timed iterations, 2 collectives each, on every rank
    assert events[events["kind"] == "collective"].groupby("rank").size().tolist() == [8, 8, 8]
    rows, segments = nsys_cp.critical_path(events)
    pd.testing.assert_frame_equal(rows, expected_rows())
    it1 = segments[segments["iteration"] == 1]
    assert it1[["rank", "kind", "name", "duration_ns"]].values.tolist() == [
        [0, "collective", "AllGather", 100_000.0],
        [1, "compute", "matmul1", 1_000 + 200_000.0 + 1_000],   # with the launch gaps before and after it
        [1, "compute", "matmul2", 250_000.0 + MM2_DELAY + 1_000],
        [0, "wait", "ReduceScatter", float(MM2_DELAY)],
        [1, "collective", "ReduceScatter", 80_000.0]]
    assert segments.loc[segments["kind"] != "wait", "duration_ns"].groupby(segments["iteration"]).sum().tolist() \
        == rows["iteration_ns"].tolist()
    assert (segments["duration_ns"] >= 0).all() and list(segments["segment"][:5]) == [0, 1, 2, 3, 4]
    assert nsys_cp.critical_path_sentence(rows.iloc[1]) == "iteration 1: rank 1's matmul2 held the ReduceScatter for 0.123 ms"
    assert nsys_cp.critical_path_sentence(rows.iloc[0]) == ("iteration 0: rank 2 held the AllGather for 50 µs "
                                                            "(its GPU had no work before it: its host was late)")
    assert nsys_cp.critical_path_sentence(rows.iloc[2]) == "iteration 2: no rank waited for another in a collective"


def test_hand_built_exports_through_collect_and_cli(hand_exports: list[Path], tmp_path: Path) -> None:
    """collect's per-file map, then its cross-rank reduce (reading the concatenated per-rank tables),
    and the CLI (files one at a time) give the same table."""
    parts = [nsys_collect.analyse_file(p, r) for r, p in enumerate(hand_exports)]
    tables = nsys_collect.NsysCollector().reduce(lambda name: pd.concat([t[name] for t in parts], ignore_index=True)
                                                 if name in parts[0] else None, print)
    pd.testing.assert_frame_equal(tables["critical_path"], expected_rows())
    assert set(tables) >= {"nccl", "critical_path", "critical_path_segments"}
    out = tmp_path / "cp.csv"
    res = CliRunner().invoke(main, ["nsys", "critical-path", *map(str, reversed(hand_exports)), "--format", "csv",
                                    "-o", str(out)])
    assert res.exit_code == 0, res.output
    pd.testing.assert_frame_equal(pd.read_csv(out, keep_default_na=False), expected_rows(), check_dtype=False)
    seg = CliRunner().invoke(main, ["nsys", "critical-path", *map(str, hand_exports), "--segments", "--format", "csv"])
    assert seg.exit_code == 0 and seg.stdout.splitlines()[0] == ",".join(core.SEGMENT_COLUMNS)
    # the whole `timed` range as one iteration: the four iterations and the 1 µs gaps between them
    # (no GPU work: the next all-gather's lead) on the path; the longest wait is still rank 1's matmul2
    whole = CliRunner().invoke(main, ["nsys", "critical-path", *map(str, hand_exports), "--iteration-range", "timed",
                                      "--format", "csv"])
    assert whole.exit_code == 0, whole.output
    assert whole.stdout.splitlines()[1] == \
        f"0,{4 * 633_000 + MM2_DELAY + MM1_DELAY + 3 * 1_000}.0,ReduceScatter,1,matmul2,123457.0,2"
    none = CliRunner().invoke(main, ["nsys", "critical-path", *map(str, hand_exports), "--iteration-range", "epoch"])
    assert none.exit_code == 0 and "no iteration has collectives on two or more ranks" in none.stderr


def test_cli_names_a_damaged_file_and_still_reports_the_others(hand_exports: list[Path], tmp_path: Path) -> None:
    bad = tmp_path / "rank3.sqlite"
    bad.write_text("not a database")
    res = CliRunner().invoke(main, ["nsys", "critical-path", *map(str, hand_exports), str(bad), "--format", "csv"])
    assert res.exit_code == 2
    assert "rank3.sqlite: not an SQLite database" in res.stderr and "Traceback" not in res.output
    assert pd.read_csv(pd.io.common.StringIO(res.stdout))["critical_rank"].tolist() == [2, 1, 0, 2]


def write_kineto(path: Path, rank: int, ops: list[dict], clock_offset: int, with_seq: bool) -> None:
    """A Kineto trace of one rank: ProfilerStep#<10 + iteration> annotations,
    phase annotations, cudaLaunchKernel calls and kernels linked by correlation (times in µs)."""
    events = []
    steps: dict[int, list[float]] = {}

    def to_us(ns: int) -> float:
        return (ns + clock_offset) / 1000

    for corr, op in enumerate(ops, start=1):
        launch = op["start"] - 5_000
        args = {"stream": 7, "correlation": corr, "device": rank}
        if op["collective"]:
            args |= {"Collective name": op["collective"], "Process Group Name": "0", "Process Group Ranks": "[0, 1, 2]"}
            if with_seq:
                args["Seq"] = 100 + corr        # sequence numbers: not the launch order in the step
        events.append({"ph": "X", "cat": "kernel", "name": KERNELS[op["collective"] or op["phase"]], "pid": 0,
                       "tid": 7, "ts": to_us(op["start"]), "dur": (op["end"] - op["start"]) / 1000, "args": args})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 9,
                       "ts": to_us(launch), "dur": 2.0, "args": {"correlation": corr}})
        events.append({"ph": "X", "cat": "user_annotation", "name": op["phase"], "pid": 9, "tid": 9,
                       "ts": to_us(launch - 100), "dur": 2.2, "args": {}})
        steps.setdefault(op["iteration"], []).append(to_us(launch))
    for it, launches in steps.items():
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{10 + it}", "pid": 9, "tid": 9,
                       "ts": launches[0] - 0.2, "dur": launches[-1] - launches[0] + 2.4, "args": {}})
    doc = {"distributedInfo": {"rank": rank, "world_size": RANKS}, "traceEvents": events}
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)


@pytest.mark.parametrize("with_seq", [True, False])
def test_hand_built_kineto_traces(tmp_path: Path, with_seq: bool) -> None:
    paths = []
    for rank, ops in enumerate(simulate()):
        paths.append(tmp_path / f"trace_{'abc'[rank]}.pt.trace.json.gz")    # the rank comes from distributedInfo
        write_kineto(paths[-1], rank, [o for o in ops if o["iteration"] >= 0], rank * 3_000_011, with_seq)
    events, errors = trace_cp.load_events(paths)
    assert errors == []
    coll = events[events["kind"] == "collective"]
    assert sorted(coll["seq"].unique()) == ([101, 104, 105, 108, 109, 112, 113, 116] if with_seq else [0, 1])
    assert set(coll["channel"]) == {"pg 0 [0, 1, 2]"}
    rows, _ = trace_cp.critical_path(events)
    expected = expected_rows()
    expected["iteration"] += 10            # ProfilerStep numbers
    pd.testing.assert_frame_equal(rows, expected)
    res = CliRunner().invoke(main, ["trace", "critical-path", *map(str, paths), "--format", "csv"])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[2] == "11,756457.0,ReduceScatter,1,matmul2,123457.0,2"


# ---------------------------------------------------------------------------------------------
# the real 2xH200 fixtures


def nth_kernel(db: Path, like: str, n: int) -> tuple[int, int, int]:
    """(start, end, correlationId) of the n-th kernel (start order) whose short name is LIKE `like`."""
    with sqlite3.connect(db) as con:
        return con.execute("SELECT k.start, k.end, k.correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                           "JOIN StringIds s ON s.id = k.shortName WHERE s.value LIKE ? ORDER BY k.start "
                           "LIMIT 1 OFFSET ?", (like, n)).fetchone()


def launch_range(db: Path, corr: int) -> str:
    """The innermost NVTX range around the launch of the operation with this correlation id (plain SQL)."""
    with sqlite3.connect(db) as con:
        return con.execute("SELECT n.text FROM NVTX_EVENTS n, CUPTI_ACTIVITY_KIND_RUNTIME r "
                           "WHERE r.correlationId = ? AND n.eventType = 59 AND n.text IS NOT NULL "
                           "AND n.start <= r.start AND n.end >= r.start ORDER BY n.start DESC LIMIT 1",
                           (corr,)).fetchone()[0]


def test_h200_seqpar_nsys(fixtures_dir: Path) -> None:
    run = fixtures_dir / "nsys" / "h200_seqpar_bf16"
    files = [run / "rank0.sqlite", run / "rank1.sqlite"]
    events = pd.concat([nsys_cp.rank_events(dist.load_activity([Export(p)], {str(p): r}))
                        for r, p in enumerate(files)], ignore_index=True)
    coll = events[events["kind"] == "collective"]
    assert coll.groupby("rank").size().tolist() == [10, 10]          # 5 steps x (all-gather, reduce-scatter)
    rows, segments = nsys_cp.critical_path(events)
    assert rows["iteration"].tolist() == [0, 1, 2, 3, 4]              # the export's 5 NVTX steps
    assert (rows["held_ns"] >= 0).all() and (segments["duration_ns"] >= 0).all()
    # iteration 2, recomputed with plain SQL: the third reduce-scatter of each rank; rank 1's is the
    # shorter (it started last), rank 0 waited the difference; the kernel before it on rank 1 was
    # launched inside NVTX `matmul2`; rank 1 set both collectives, so the length is its RS end - AG start
    rs0, rs1 = (nth_kernel(f, "ncclDevKernel_ReduceScatter%", 2) for f in files)
    ag1 = nth_kernel(files[1], "ncclDevKernel_AllGather%", 2)
    gemm = nth_kernel(files[1], "nvjet%", 5)                         # matmul1, matmul2 per step: the 6th
    assert gemm[1] <= rs1[0] and launch_range(files[1], gemm[2]) == "matmul2"
    mm1, mm2 = ([nth_kernel(f, "nvjet%", n) for f in files] for n in (4, 5))
    slower = {name: (k1[1] - k1[0]) - (k0[1] - k0[0]) for name, (k0, k1) in (("matmul1", mm1), ("matmul2", mm2))}
    assert max(slower, key=slower.get) == "matmul2" and slower["matmul2"] > 0   # rank 1's matmul2: +22 µs
    row = rows.set_index("iteration").loc[2]
    assert (row["collective"], row["critical_rank"], row["held_by"]) == ("ReduceScatter", 1, "matmul2")
    assert row["held_ns"] == (rs0[1] - rs0[0]) - (rs1[1] - rs1[0]) == 28_672
    assert row["iteration_ns"] == rs1[1] - ag1[0]
    # the first step's all-gather waited for rank 1 to start at all (36 ms: its host, not its GPU)
    assert rows.iloc[0][["collective", "critical_rank", "held_by"]].tolist() == ["AllGather", 1, core.IDLE]


def timed_iterations_sql(db: Path) -> int:
    """NVTX `iteration` ranges inside the `timed` range, in plain SQL."""
    with sqlite3.connect(db) as con:
        return con.execute(
            "WITH r AS (SELECT n.start, n.end, coalesce(n.text, s.value) AS name FROM NVTX_EVENTS n "
            "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType = 59) "
            "SELECT count(*) FROM r i, r t WHERE i.name = 'iteration' AND t.name = 'timed' "
            "AND i.start >= t.start AND i.end <= t.end").fetchone()[0]


def test_h200_campaign_nsys(fixtures_dir: Path) -> None:
    """DDP ws2 (Echo's backward window on both ranks): one iteration, 49 all-reduces on each rank
    (the 50th, in the window barrier, is outside).
    seqpar fp32 p2 (one rank's export only): its timed iterations, and no cross-rank table."""
    camp = fixtures_dir / "nsys" / "h200_campaign"
    files = [camp / "ddp_ws2_rank0.sqlite", camp / "ddp_ws2_rank1.sqlite"]
    events = pd.concat([nsys_cp.rank_events(dist.load_activity([Export(p)], {str(p): r}))
                        for r, p in enumerate(files)], ignore_index=True)
    counts = []
    for f in files:      # NCCL kernels launched inside the NVTX `backward` range, in plain SQL
        with sqlite3.connect(f) as con:
            counts.append(con.execute(
                "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
                "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
                "JOIN NVTX_EVENTS n LEFT JOIN StringIds t ON t.id = n.textId "
                "WHERE s.value LIKE 'nccl%' AND coalesce(n.text, t.value) = 'backward' "
                "AND r.start BETWEEN n.start AND n.end").fetchone()[0])
    assert events[events["kind"] == "collective"].groupby("rank").size().tolist() == counts == [49, 49]
    rows, segments = nsys_cp.critical_path(events)
    assert rows["iteration"].tolist() == [0] and rows["collective"].tolist() == ["AllReduce"]
    assert (segments["duration_ns"] >= 0).all() and rows["held_ns"].iloc[0] > 0

    single = camp / "seqpar_fp32_p2_rank1.sqlite"
    one = nsys_cp.rank_events(dist.load_activity([Export(single)], {str(single): 1}))
    timed = timed_iterations_sql(single)
    assert sorted(one["iteration"].unique()) == list(range(timed)) and timed > 0
    assert nsys_cp.critical_path(one)[0].empty


def test_h200_kineto_fixtures(fixtures_dir: Path) -> None:
    run = fixtures_dir / "hta" / "h200_seqpar_bf16"
    events, errors = trace_cp.load_events(sorted(run.glob("*.json.gz")))
    assert errors == []
    assert events[events["kind"] == "collective"].groupby("rank").size().tolist() == [6, 6]
    rows, segments = trace_cp.critical_path(events)
    assert rows["iteration"].tolist() == [2, 3, 4]                   # ProfilerStep#2..#4
    assert (rows["held_ns"] >= 0).all() and (segments["duration_ns"] >= 0).all()

    def rs_in_step(rank: int, step: int) -> float:
        """Duration (ns) of the reduce-scatter kernel launched inside ProfilerStep#step (plain json)."""
        with gzip.open(run / f"rank{rank}.pt.trace.json.gz") as fh:
            ev = json.load(fh)["traceEvents"]
        s = next(e for e in ev if e.get("name") == f"ProfilerStep#{step}")
        launched = {e["args"]["correlation"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
                    and s["ts"] <= e["ts"] <= s["ts"] + s["dur"]}
        k = next(e for e in ev if e.get("cat") == "kernel" and "ReduceScatter" in e["name"]
                 and e["args"]["correlation"] in launched)
        return round(k["dur"] * 1000)

    row = rows.set_index("iteration").loc[3]
    d0, d1 = rs_in_step(0, 3), rs_in_step(1, 3)
    assert row["collective"] == "ReduceScatter" and row["held_by"] == "matmul2"
    assert row["held_ns"] == abs(d0 - d1) and row["critical_rank"] == (0 if d0 < d1 else 1)

    ddp = fixtures_dir / "hta" / "h200_ddp_gpt2"
    parts = [trace_collect.analyse_file(p, r) for r, p in enumerate(sorted(ddp.glob("*.json.gz")))]
    tables = trace_collect.TorchCollector().reduce(lambda n: pd.concat([t[n] for t in parts], ignore_index=True),
                                                   print)
    ddp_rows = tables["critical_path"]
    assert ddp_rows["iteration"].tolist() == [30]                    # the one ProfilerStep captured
    events = pd.concat([t["critical_path_events"] for t in parts])
    counts = events[events["kind"] == "collective"].groupby("rank").size().tolist()
    assert counts[0] == counts[1] == 50
    assert (tables["critical_path_segments"]["duration_ns"] >= 0).all()


def test_one_rank_gives_no_cross_rank_table() -> None:
    assert core.collect_tables(lambda name: core.empty_events(), print) == {}
    assert core.critical_path(core.empty_events())[0].columns.tolist() == core.ROW_COLUMNS


def test_collect_writes_the_tables(hand_exports: list[Path], tmp_path: Path) -> None:
    """`collect`'s map (one worker call per rank file, parts on disk) and reduce (Parquet in, Parquet out)."""
    from hpcprof.collect import InProcess, map_files, reduce_parts
    from hpcprof.run.results import read_table

    problems: list[str] = []
    mapped = map_files("nsys", {str(p): r for r, p in enumerate(hand_exports)}, tmp_path, InProcess(), lambda line: None,
                       problems.append)
    written = reduce_parts("nsys", tmp_path, mapped, InProcess(), lambda line: None)
    assert problems == [] and {"nsys_critical_path", "nsys_critical_path_segments"} <= set(written)
    rows = read_table(tmp_path, "nsys_critical_path")
    pd.testing.assert_frame_equal(rows, expected_rows(), check_dtype=False)
    assert read_table(tmp_path, "nsys_critical_path_segments").columns.tolist() == core.SEGMENT_COLUMNS


def reference_critical_path(events: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """core.critical_path in pandas (groupby, idxmin/idxmax, merge; hpcprof's own until it went
    columnar): the differential test's reference."""
    rows_out = pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(
        core.ROW_COLUMNS, ("int64", "float64", "object", "int64", "object", "float64", "int64"), strict=True)})
    segs_out = pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(
        core.SEGMENT_COLUMNS, ("int64", "int64", "int64", "object", "object", "float64", "float64", "float64"),
        strict=True)})
    if events is None or events.empty or events.loc[events["kind"] == "collective", "rank"].nunique() < 2:
        return rows_out, segs_out
    events = events.sort_values(["rank", "iteration", "start"], kind="stable").reset_index(drop=True)
    key = ["iteration", "channel", "seq"]
    coll = events[events["kind"] == "collective"].copy()
    coll["dur"] = coll["end"] - coll["start"]
    by_key = coll.groupby(key, sort=False)
    coll["wait"] = coll["dur"] - by_key["dur"].transform("min")
    crit = coll.loc[by_key["dur"].idxmin()].set_index(key)
    waiter = coll.loc[by_key["wait"].idxmax()].set_index(key)
    waiting = (coll["wait"] > 0).groupby([coll[k] for k in key]).sum()
    node = {k: (int(r["rank"]), str(r["name"]), int(r["start"]), int(r["end"]), (str(r["prev_channel"]), int(r["prev_seq"])))
            for k, r in crit.iterrows()}
    hold = {k: (int(r["rank"]), int(r["wait"]), int(r["start"])) for k, r in waiter.iterrows()}

    # the tail: per iteration, the rank with the most work after its last collective
    ends = events[events["kind"] == "end"].merge(
        coll[["rank", "iteration", "channel", "seq", "end"]].rename(
            columns={"channel": "prev_channel", "seq": "prev_seq", "end": "prev_end"}),
        on=["rank", "iteration", "prev_channel", "prev_seq"])
    ends["tail"] = ends["start"] - ends["prev_end"]
    last = ends.loc[ends.groupby("iteration")["tail"].idxmax()]
    compute = events[events["kind"] == "compute"]
    leads = compute.groupby(["rank", "iteration", "channel", "seq"], sort=False).indices
    names, starts, stops = (compute[c].to_numpy() for c in ("name", "start", "end"))

    rows, segs = [], []
    for _, t in last.iterrows():
        it = int(t["iteration"])

        def lead_of(rank: int, k: tuple[str, int], it: int = it) -> list[core.Segment]:
            idx = leads.get((rank, it, k[0], k[1]), [])
            return [(rank, "compute", str(names[i]), int(starts[i]), int(stops[i])) for i in idx]

        blocks: list[tuple[list[core.Segment], core.Held | None]] = [(lead_of(int(t["rank"]), core.END), None)]
        at, seen = (str(t["prev_channel"]), int(t["prev_seq"])), set()
        while at != core.END and (node_key := (it, *at)) in node and at not in seen:
            seen.add(at)
            rank, name, start, end, prev = node[node_key]
            w_rank, wait, w_start = hold[node_key]
            lead = lead_of(rank, at)
            waited = [(w_rank, "wait", name, w_start, w_start + wait)] if wait > 0 else []
            blocks.append((lead + waited + [(rank, "collective", name, start, end)], (at, rank, name, wait, lead)))
            at = prev
        chain = [seg for block, _ in reversed(blocks) for seg in block]
        held = [info for _, info in reversed(blocks) if info is not None]
        if not held:
            continue
        on_path = sum(e - s for _, kind, _, s, e in chain if kind != "wait")
        k, rank, name, wait, lead = max(held, key=lambda h: h[3])      # the first of equal waits
        node_key = (it, *k)
        rows.append((it, float(on_path), name, rank, core._culprit(lead, lead_of(hold[node_key][0], k)), float(wait),
                     int(waiting.get(node_key, 0))))
        segs += [(it, i, r, kind, n, float(s), float(e), float(e - s)) for i, (r, kind, n, s, e) in enumerate(chain)]
    if rows:
        rows_out = pd.DataFrame(rows, columns=core.ROW_COLUMNS).astype(rows_out.dtypes.to_dict())
    if segs:
        segs_out = pd.DataFrame(segs, columns=core.SEGMENT_COLUMNS).astype(segs_out.dtypes.to_dict())
    return rows_out, segs_out


def test_columnar_critical_path_equals_the_pandas_one_on_many_ranks(fixtures_dir: Path) -> None:
    """64 ranks made of the two H200 seqpar ranks' events, each collective's duration jittered (equal
    durations and waits included, so that the first of equals decides), rows shuffled: the same
    tables as the pandas formulation."""
    import numpy as np

    run = fixtures_dir / "nsys" / "h200_seqpar_bf16"
    base = [nsys_cp.rank_events(dist.load_activity([Export(p)], {str(p): r}))
            for r, p in enumerate([run / "rank0.sqlite", run / "rank1.sqlite"])]
    rng = np.random.default_rng(21)
    for trial in range(3):
        ranks = []
        for rank in range(64):
            events = base[rank % 2].assign(rank=rank)
            jitter = rng.integers(0, 3, len(events)) * 1000 * (events["kind"] == "collective")
            ranks.append(events.assign(start=events["start"] - jitter))
        events = pd.concat(ranks, ignore_index=True).sample(frac=1, random_state=trial).reset_index(drop=True)
        in_order = events.sort_values(["rank", "iteration", "start"], kind="stable").reset_index(drop=True)
        expected = reference_critical_path(events)
        assert len(expected[0]) == 5 and expected[0]["waiting_ranks"].max() > 1
        for got in (core.critical_path(events), core.critical_path(in_order)):   # sorted here / already in order
            for table, reference in zip(got, expected, strict=True):
                pd.testing.assert_frame_equal(table, reference)


def test_dense_codes_equal_rows_alike_in_mixed_radix_and_past_int64() -> None:
    """_dense: equal rows, equal codes, distinct rows, distinct codes, with the columns' ranges'
    product within int64 (one hash of a mixed-radix key) and past it (column by column)."""
    import numpy as np

    rng = np.random.default_rng(5)
    small = [rng.integers(-3, 4, 2000), rng.integers(0, 2, 2000), rng.integers(10, 14, 2000)]
    huge = [rng.choice(np.array([-2**62, 0, 2**62]), 2000), rng.choice(np.array([-2**61, 5, 2**61]), 2000)]
    for columns in (small, huge):
        codes = core._dense(*columns)
        rows = list(zip(*(c.tolist() for c in columns), strict=True))
        assert len(set(codes.tolist())) == len(set(rows)) and codes.min() == 0 and codes.max() == len(set(rows)) - 1
        assert all(len({codes[i] for i in range(len(rows)) if rows[i] == row}) == 1 for row in set(rows))
    assert core._in_order(np.array([0, 0, 1, 1]), np.array([1, 2, 0, 0]), np.array([5, 1, 3, 3]))
    assert not core._in_order(np.array([0, 1, 0]), np.array([0, 0, 0]), np.array([0, 0, 0]))


def reference_frame(gathered: trace_cp.CriticalPathEvents, rank: int) -> pd.DataFrame:
    """A trace's events table by the pandas formulation CriticalPathEvents.frame had before its
    numpy columns (frames of the gathered tuples, `str.extract`, `Series.map`)."""
    import numpy as np

    ops = pd.DataFrame(gathered.gpu, columns=["start", "end", "stream", "corr", "name", "group", "seq"])
    ops["launch"] = ops["corr"].map(gathered.launch)
    nccl = ops["name"].str.startswith("nccl").to_numpy()
    coll = ops["name"].str.extract(r"^nccl(?:Dev)?Kernel_([A-Za-z0-9]+?)(?:_|\(|$)", expand=False)
    ops["collective"] = np.where(nccl, coll.fillna("other").to_numpy(object), None)
    first = ops[nccl].groupby("stream")["start"].min().sort_values(kind="stable")
    by_stream = ops["stream"].map({s: f"stream{i}" for i, s in enumerate(first.index)})
    ops["channel"] = np.where(ops["group"].notna(), ops["group"], by_stream)
    its = pd.DataFrame(gathered.steps, columns=["number", "start", "end"])
    return core.rank_events(rank, ops, its, pd.DataFrame(gathered.ranges, columns=["name", "start", "end"]))


@pytest.mark.slow
@pytest.mark.parametrize("with_seq", [True, False])
def test_kineto_events_table_equals_the_pandas_formulation(fixtures_dir: Path, tmp_path: Path, with_seq: bool) -> None:
    """CriticalPathEvents.frame (numpy columns) gives the table of the pandas formulation on every
    Kineto fixture (NCCL kernels with and without process groups, streams in order of first use,
    launches missing from the trace) and on the hand-built traces (with and without Seq)."""
    from hpcprof.tools.torch.analysis.load import scan_trace

    paths = sorted((fixtures_dir / "hta").glob("*/*.json.gz"))
    for rank, ops in enumerate(simulate()):
        paths.append(tmp_path / f"rank{rank}.json.gz")
        write_kineto(paths[-1], rank, [o for o in ops if o["iteration"] >= 0], rank * 3_000_011, with_seq)
    compared = 0
    for path in paths:
        gathered = trace_cp.CriticalPathEvents()
        scan_trace(path, gathered.add)
        if not gathered.gpu:
            continue
        got = gathered.frame(path, 3)
        pd.testing.assert_frame_equal(got, reference_frame(gathered, 3), obj=str(path))
        compared += len(got)
    assert compared > 400


def test_a_launch_at_its_step_start_in_epoch_microseconds_is_inside(tmp_path: Path) -> None:
    """Kineto traces of older PyTorch count µs since the epoch: in ns those pass 2**53, where a float64
    is off by up to 128 ns. A collective launched at the very µs its ProfilerStep starts (1682725897226747
    µs: 120 ns low as a float) belongs to that step, and its times are exact: times stay integers."""
    t0 = 1682725897226747
    assert int(float(t0 * 1000)) < t0 * 1000
    group = {"Process Group Name": "0", "Process Group Ranks": "[0, 1]"}
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "ts": t0, "dur": 100, "args": {}},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": t0, "dur": 2,
               "args": {"correlation": 1}},
              {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "ts": t0 + 10, "dur": 5,
               "args": {"stream": 7, "correlation": 1, **group}}]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"distributedInfo": {"rank": 0}, "traceEvents": events}))
    table = trace_cp.file_events(path)
    assert table[["iteration", "kind", "name", "start", "end"]].values.tolist()[0] == [
        4, "collective", "AllReduce", (t0 + 10) * 1000, (t0 + 15) * 1000]
    assert trace_cp._ns(t0 + 0.25) == t0 * 1000 + 250 and trace_cp._ns(4485879277322.809) == 4485879277322809


def test_events_of_many_ranks_at_once_equal_each_alone(fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """core.events_of_ranks over the (rank, ops, iterations, ranges) parts of several exports at once
    (each part's times moved into a band of its own) gives each part's rows as it gives them alone, in
    the parts' order: the real seqpar, DDP and Echo exports, one part with no launch known (no rows),
    and parts whose clocks lie too far apart to share one axis (then taken one by one); an export of
    NVTX ranges and no GPU work beside another adds no rows (it made the reader fail)."""
    import numpy as np

    files = sorted((fixtures_dir / "nsys" / "h200_campaign").glob("*.sqlite"))
    files += [fixtures_dir / "nsys" / "h200_seqpar_bf16" / f"rank{r}.sqlite" for r in (0, 1)]
    captured: list[list] = []
    monkeypatch.setattr(nsys_cp, "events_of_ranks", lambda parts: captured.append(parts) or core.events_of_ranks(parts))
    joint = nsys_cp.rank_event_columns(dist.load_activity([Export(p) for p in files],
                                                          {str(p): r for r, p in enumerate(files)}))
    [parts] = captured
    assert joint is not None and len(parts) >= len(files)

    def alone(parts: list) -> pd.DataFrame:
        each = [pd.DataFrame(c) for part in parts if (c := core.events_of_ranks([part])) is not None]
        return pd.concat(each, ignore_index=True)

    pd.testing.assert_frame_equal(pd.DataFrame(joint), alone(parts))
    rank, ops, its, ranges = next(part for part in parts if core.events_of_ranks([part]) is not None)
    unknown = (99, {**ops, "launch": np.full(len(ops["start"]), np.nan)}, its, ranges)
    shifted = [(rank + 100 * i, {**ops, **{c: ops[c] - 3 * i * 10**18 for c in ("start", "end", "launch")}},
                {**its, "start": its["start"] - 3 * i * 10**18, "end": its["end"] - 3 * i * 10**18},
                {**ranges, "start": ranges["start"] - 3 * i * 10**18, "end": ranges["end"] - 3 * i * 10**18})
               for i in range(3)]                            # clocks far apart: each part in its own band
    wide = [(rank + 1000 + i, ops, its, {c: np.append(ranges[c], value) for c, value in
                                         (("name", "far"), ("start", -4 * 10**18), ("end", -4 * 10**18 + 1))})
            for i in range(2)]                               # each part's own times 4e18 ns apart: one by one
    calls: list[int] = []
    events_of_ranks = core.events_of_ranks
    monkeypatch.setattr(core, "events_of_ranks", lambda parts: calls.append(len(parts)) or events_of_ranks(parts))
    for mixed, expected_calls in ((parts[::-1] + [unknown], 1), (shifted + parts[:2], 1), (wide + parts[:1], 4)):
        calls.clear()
        got = core.events_of_ranks(mixed)
        assert got is not None and len(calls) == expected_calls
        pd.testing.assert_frame_equal(pd.DataFrame(got), alone(mixed))
    assert core.events_of_ranks([unknown]) is None and core.events_of_ranks([]) is None
    idle = next((fixtures_dir / "gpu" / "h200_window_campaign" / "window-seqpar-nvtx").glob("*/profiles/nsys/rank1.sqlite"))
    seqpar = fixtures_dir / "nsys" / "h200_seqpar_bf16" / "rank0.sqlite"   # with an export of NVTX ranges and no GPU work
    both = nsys_cp.rank_events(dist.load_activity([Export(seqpar), Export(idle)], {str(seqpar): 0, str(idle): 1}))
    pd.testing.assert_frame_equal(both, nsys_cp.rank_events(dist.load_activity([Export(seqpar)], {str(seqpar): 0})))
