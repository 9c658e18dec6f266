"""The summary reports' packed, parallel reads give the same bytes as the general column reads,
and fall back to them where a packed read does not apply."""

from __future__ import annotations

import io
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import hpcprof.tools.nsys.stats.arrow as nsys_arrow
import hpcprof.tools.nsys.stats.db as nsys_db
from hpcprof.tools.nsys.stats import reports
from hpcprof.tools.nsys.stats.db import Export
from hpcprof.tools.nsys.stats.nvtx import nvtx_groups_packed
from hpcprof.tools.nsys.stats.schema import NVTX_PUSHPOP, NVTX_STARTEND, OLD, RUNTIME
from hpcprof.tools.nsys.stats.stats import run_reports
from hpcprof.tools.nsys.stats.table import write_csv

FIXTURES = ["fuser_report1_nsys2024.6.2", "fuser_report1_nsys2025.1.1", "nsysai_h100_2gpu_1s",
            "nsysai_mfu_2gpu_after", "nsysai_mfu_2gpu_before", "nsysai_mock", "h200_seqpar_bf16/rank0"]
NSYS_2022 = Path("/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys")
SUMMARIES = ["gpukernsum", "cudaapisum", "gpumemtimesum", "gpumemsizesum", "nvtxsum", "nvtxppsum", "osrtsum",
             "cuda_gpu_kern_gb_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum", "nvtx_sum",
             "osrt_sum"]


def _csvs(db: Path) -> dict[str, str]:
    out = {}
    with Export(db) as export:
        for name, df in zip(SUMMARIES, run_reports(export, SUMMARIES), strict=True):
            if isinstance(df, Exception):
                out[name] = f"{type(df).__name__}: {df}"
                continue
            buf = io.StringIO()
            write_csv(df, buf)
            out[name] = buf.getvalue()
    return out


def _general(monkeypatch: pytest.MonkeyPatch) -> None:
    """Turn the packed reads off: every report takes its general path."""
    monkeypatch.setattr(reports, "nvtx_groups_packed", lambda *a, **k: None)
    monkeypatch.setattr(reports, "_packed_by_id", lambda *a, **k: None)
    monkeypatch.setattr(reports, "_kern_gb_packed", lambda *a, **k: None)


@pytest.mark.slow
@pytest.mark.parametrize("fixture", FIXTURES)
def test_packed_reads_equal_the_general_reads(fixtures_dir: Path, fixture: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    db = fixtures_dir / "nsys" / f"{fixture}.sqlite"
    monkeypatch.setattr(nsys_db, "SPLIT_ROWS", 1000)          # small tables are split into parallel parts too
    fast = _csvs(db)
    _general(monkeypatch)
    assert fast == _csvs(db)


@pytest.mark.slow
def test_fallback_where_values_do_not_pack(fixtures_dir: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """An unterminated NVTX range, a kernel grid beyond the packed width and an API call of more
    than 2^41 ns: the packed reads decline and the general reads give the answer."""
    db = tmp_path / "edited.sqlite"
    shutil.copy(fixtures_dir / "nsys" / "nsysai_mfu_2gpu_before.sqlite", db)
    db.chmod(0o644)
    con = sqlite3.connect(db)
    con.execute("UPDATE NVTX_EVENTS SET end = NULL WHERE rowid = (SELECT max(rowid) FROM NVTX_EVENTS)")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridY = 70000 WHERE rowid = 1")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET end = start + (1 << 42) WHERE rowid = 1")
    con.commit()
    con.close()
    with Export(db) as export:
        assert nvtx_groups_packed(export, NVTX_PUSHPOP + NVTX_STARTEND, OLD, True) is None
        assert reports._kern_gb_packed(export) is None
        assert reports._packed_by_id(export, RUNTIME, "nameId") is None
    fast = _csvs(db)
    _general(monkeypatch)
    assert fast == _csvs(db)


def _edited(fixtures_dir: Path, tmp_path: Path, *sql: str) -> Path:
    """A copy of the H200 seqpar export (it creates an NCCL NVTX domain before the capture: a
    negative start) with `sql` applied."""
    db = tmp_path / "edited.sqlite"
    shutil.copy(fixtures_dir / "nsys" / "h200_seqpar_bf16" / "rank0.sqlite", db)
    db.chmod(0o644)
    con = sqlite3.connect(db)
    for statement in sql:
        con.execute(statement)
    con.commit()
    con.close()
    return db


DOMAIN_ROW = "(SELECT min(rowid) FROM NVTX_EVENTS WHERE eventType = 75)"
RANGE_ROW = "(SELECT min(rowid) FROM NVTX_EVENTS WHERE eventType = 59 AND domainId = 1)"


@pytest.mark.parametrize(("case", "packed", "sql"), [
    ("as recorded", True, []),
    # an earlier creation of the same domain under another name: the first by start names its ranges
    ("renamed earlier", True, [f"INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, domainId, text) "
                               f"SELECT start - 5, NULL, 75, globalTid, domainId, 'EARLIER' FROM NVTX_EVENTS "
                               f"WHERE rowid = {DOMAIN_ROW}"]),
    ("domain row with an end", True, [f"UPDATE NVTX_EVENTS SET end = start + 7 WHERE rowid = {DOMAIN_ROW}"]),
    ("a domain start before -2^55", False, [f"UPDATE NVTX_EVENTS SET start = {-(1 << 60)} WHERE rowid = {DOMAIN_ROW}"]),
    ("a domainId past 2^39", False, [f"UPDATE NVTX_EVENTS SET domainId = {1 << 40} WHERE rowid = {RANGE_ROW}"]),
])
def test_nvtx_domains_named_in_the_one_scan(fixtures_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           case: str, packed: bool, sql: list[str]) -> None:
    """The packed NVTX read names ranges by their domain from the same scan (the domain rows'
    starts and every row's domainId and process ride along); where those do not pack it declines,
    and either way the summaries equal the general reads'."""
    db = _edited(fixtures_dir, tmp_path, *sql)
    with Export(db) as export:
        assert export.sql_rows("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 75 AND start < 0")[0][0] >= 1
        declined = nvtx_groups_packed(export, NVTX_PUSHPOP + NVTX_STARTEND, OLD, True) is None
    assert declined is not packed, case
    fast = _csvs(db)
    assert ("EARLIER:" if case == "renamed earlier" else "NCCL:") in fast["nvtxsum"]
    _general(monkeypatch)
    assert fast == _csvs(db)
    if NSYS_2022.exists():      # and nsys 2022.4 itself (installed by tests/run.sh as root, as in CI)
        subprocess.run([str(NSYS_2022), "stats", "--report", "nvtxsum", "--format", "csv", "--force-overwrite",
                        "true", "--output", str(db.with_suffix("")), str(db)], capture_output=True, timeout=300)
        assert fast["nvtxsum"] == Path(f"{db.with_suffix('')}_nvtxsum.csv").read_text(), case
    else:
        assert os.environ.get("CI") != "true", "nsys 2022.4 is missing in CI"


@pytest.mark.slow
@pytest.mark.parametrize("fixture", FIXTURES)
def test_small_tables_read_through_sqlite3_equal_the_adbc_reads(fixtures_dir: Path, fixture: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables up to SMALL_READ_ROWS rows are read through sqlite3 (no ADBC connection); with the
    bound raised past every table, and at -1 (every read through ADBC), the reports and collect's
    per-rank tables are the same."""
    from hpcprof.tools.nsys.analysis.collect import analyse_tables

    db = fixtures_dir / "nsys" / f"{fixture}.sqlite"
    outputs = []
    opened: list[str] = []
    monkeypatch.setattr(nsys_arrow.ArrowConnection, "__init__", _counting(opened))
    for bound in (1 << 40, -1):
        monkeypatch.setattr(nsys_db, "SMALL_READ_ROWS", bound)
        opened.clear()
        try:
            tables = {name: table.to_pylist() for name, table in analyse_tables(db, 0).items()}
        except nsys_db.NsysInputError as exc:     # an export collect refuses: refused alike
            tables = {"error": str(exc)}
        outputs.append((_csvs(db), tables))
        assert bool(opened) == (bound == -1)
    assert outputs[0] == outputs[1]


def _counting(opened: list[str]) -> Callable[[nsys_arrow.ArrowConnection, str], None]:
    """ArrowConnection.__init__, noting each connection opened."""
    original = nsys_arrow.ArrowConnection.__init__

    def init(self: nsys_arrow.ArrowConnection, uri: str) -> None:
        opened.append(uri)
        original(self, uri)

    return init


def test_small_batch_types_as_adbc_and_declines_what_it_cannot() -> None:
    batch = nsys_arrow.small_batch([(1, 2.5, "a\x00b"), (-3, 0.0, "\x00")])
    assert batch is not None and [str(t) for t in batch.schema.types] == ["int64", "double", "string"]
    assert batch.column(2).to_pylist() == ["a\x00b", "\x00"]                 # NUL kept (the NULL marker)
    assert nsys_arrow.small_batch([(1,), (None,)]) is None                      # a NULL: read by ADBC
    assert nsys_arrow.small_batch([(1,), ("x",)]) is None                       # mixed types likewise
