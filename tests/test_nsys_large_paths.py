"""The nsys analyses on a large export (hpcprof/tools/nsys/analysis/distributed.py, critical_path.py): one
rank's export repeated K times in time (every copy's activity shifted past the last) must give K
times the sums of one copy (phases, nccl, overlap, the critical path's events); the names are
tested once per distinct value (distributed.per_distinct), which must equal a test of each row."""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hpcprof.analysis.nccl import NCCL_KERNEL
from hpcprof.tools.nsys.analysis import critical_path as cp
from hpcprof.tools.nsys.analysis import distributed as dist
from hpcprof.tools.nsys.stats.db import Export

SEQPAR = Path("nsys") / "h200_seqpar_bf16"
COPIES = 250                 # 2,500 NCCL kernels (10 a copy)
TIMED = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
         "CUPTI_ACTIVITY_KIND_MEMSET", "NVTX_EVENTS", "OSRT_API", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
         "PROFILER_OVERHEAD"]


def repeated(source: Path, copies: int, out: Path) -> Path:
    """`source` with its timed activity repeated `copies` times, each copy after the last
    (correlation ids shifted too, so each copy's calls launch only that copy's operations)."""
    shutil.copyfile(source, out)
    con = sqlite3.connect(out)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")} & set(TIMED)
    bounds = [con.execute(f"SELECT min(start), max(coalesce(end, start)) FROM {t}").fetchone() for t in tables]
    span = max(b[1] for b in bounds if b[1] is not None) - min(b[0] for b in bounds if b[0] is not None) + 1000
    columns = {t: [r[1] for r in con.execute(f"PRAGMA table_info({t})")] for t in tables}
    corr = 1 + max(con.execute(f"SELECT max(correlationId) FROM {t}").fetchone()[0] or 0
                   for t in tables if "correlationId" in columns[t])
    for table in tables:
        cols = [c for c in columns[table] if c != "id"]            # an INTEGER PRIMARY KEY id: new ones
        shifted = [f"{c} + {{i}} * {span}" if c in ("start", "end") else
                   f"{c} + {{i}} * {corr}" if c == "correlationId" else c for c in cols]
        for i in range(1, copies):
            con.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(shifted).format(i=i)} "
                        f"FROM {table} WHERE start < (SELECT min(start) FROM {table}) + {span}")
    con.commit()
    con.close()
    return out


@pytest.fixture(scope="module")
def exports(fixtures_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    source = fixtures_dir / SEQPAR / "rank0.sqlite"
    return source, repeated(source, COPIES, tmp_path_factory.mktemp("large") / "rank0.sqlite")


def analyses(path: Path) -> dict[str, pd.DataFrame]:
    with Export(path) as export:
        act = dist.load_activity([export])
        return {"phases": dist.phases(act), "nccl": dist.nccl_per_rank(act), "overlap": dist.overlap(act),
                "events": cp.rank_events(act), "gaps": dist.gaps(act, 1000)}


def test_a_repeated_export_sums_to_copies_times_one(exports: tuple[Path, Path]) -> None:
    one, many = (analyses(p) for p in exports)
    assert len(one["events"]) and many["nccl"]["count"].sum() == COPIES * 10
    sums = ["instances", "gpu_ops", "kernels", "gpu_time_ns", "proj_time_ns", "range_time_ns"]
    pd.testing.assert_frame_equal(many["phases"].drop(columns=sums), one["phases"].drop(columns=sums))
    assert (many["phases"][sums] == COPIES * one["phases"][sums]).all().all()
    nccl_sums = ["count", "total_ns"]
    pd.testing.assert_frame_equal(many["nccl"].drop(columns=nccl_sums), one["nccl"].drop(columns=nccl_sums))
    assert (many["nccl"][nccl_sums] == COPIES * one["nccl"][nccl_sums]).all().all()
    overlap_sums = ["compute_ns", "comm_ns", "overlap_ns"]
    assert (many["overlap"][overlap_sums] == COPIES * one["overlap"][overlap_sums]).all().all()
    assert (many["overlap"]["overlap_pct"] == one["overlap"]["overlap_pct"]).all()
    assert len(many["events"]) == COPIES * len(one["events"])
    per_copy = many["events"].drop(columns=["iteration", "start", "end"]).iloc[: len(one["events"])]
    pd.testing.assert_frame_equal(per_copy.reset_index(drop=True), one["events"].drop(columns=["iteration", "start",
                                                                                             "end"]))


def test_names_tested_once_per_distinct_value_as_per_row() -> None:
    """is_nccl and collectives (one test per distinct name) equal the rule applied to each row."""
    names = np.array(["ncclDevKernel_AllGather_RING(x)", None, float("nan"), "gemm", 3, "ncclKernel_SendRecv"] * 500,
                     dtype=object)
    others = names[::-1].copy()

    def kind(n: object) -> str | None:
        m = re.match(NCCL_KERNEL, n) if isinstance(n, str) else None
        return m.group(1) if m else None

    per_row = [n.startswith("nccl") if isinstance(n, str) else n is not None for n in names.tolist()]
    assert dist.is_nccl(names).tolist() == per_row
    assert per_row[:6] == [True, False, True, False, True, True]
    assert dist.collectives(names, others).tolist() == [kind(a) or kind(b) or "other"
                                                        for a, b in zip(names.tolist(), others.tolist(), strict=True)]


def test_call_codes_name_each_file_process_and_correlation(exports: tuple[Path, Path], fixtures_dir: Path) -> None:
    """Equal codes exactly where (file, process, correlation id) are equal, over two files."""
    with Export(exports[1]) as a, Export(fixtures_dir / SEQPAR / "rank1.sqlite") as b:
        act = dist.load_activity([a, b])
        calls, ops = dist.call_op_codes(act)
        keys = pd.DataFrame({"file": np.concatenate((act.runtime["file"].to_numpy(object), act.column("file"))),
                             "gpid": np.concatenate((act.runtime["gpid"].to_numpy(), act.column("gpid"))),
                             "corr": np.concatenate((act.runtime["corr"].to_numpy(), act.column("corr")))})
    keys["code"] = np.concatenate((calls, ops))
    assert (keys.groupby(["file", "gpid", "corr"])["code"].nunique() == 1).all()
    assert (keys.groupby("code")[["file", "gpid", "corr"]].nunique() == 1).all().all()


def test_parents_by_pointer_jumping_equal_the_stack_walk() -> None:
    """critical_path._parents (vectorised) against the stack walk it replaces, on random ranges
    sorted by start then longest first: nested, overlapping without nesting, tied, empty."""
    from hpcprof.analysis.critical_path import _parents

    def stack_walk(starts: np.ndarray, ends: np.ndarray) -> list[int]:
        parent, stack = [], []
        for i in range(len(starts)):
            while stack and ends[stack[-1]] < starts[i]:
                stack.pop()
            parent.append(stack[-1] if stack else -1)
            stack.append(i)
        return parent

    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(0, 120))
        starts = rng.integers(0, 80, n)
        ends = starts + rng.integers(0, 30, n)
        order = np.lexsort((-ends, starts))
        assert _parents(starts[order], ends[order]).tolist() == stack_walk(starts[order], ends[order])
