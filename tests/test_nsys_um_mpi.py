"""The unified memory, OpenMP and MPI reports of `hpcprof nsys stats` on a small export whose
every number is worked out by hand below from nsys's SQL (um_sum.py, um_total_sum.py,
um_cpu_page_faults_sum.py, openmp_sum.py, mpi_event_sum.py, mpi_event_trace.py of nsys 2025.3.1),
and what they say when the export lacks their tables. tests/test_differential_nsys_extra.py
compares them with nsys itself on generated exports."""

from __future__ import annotations

import io
import sqlite3
from pathlib import Path

import pytest
from hpcprof_cli import hpcprof

from hpcprof.tools.nsys.stats.db import Export
from hpcprof.tools.nsys.stats.schema import MissingData
from hpcprof.tools.nsys.stats.stats import run_table
from hpcprof.tools.nsys.stats.table import write_csv

G1, G2 = 5 << 24 | 6, 7 << 24 | 8            # (pid 5, tid 6) has rank 0; (pid 7, tid 8) no rank


def _export(path: Path, um: bool = True, mpi: bool = True) -> Path:
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO StringIds VALUES (10, 'main'), (11, 'foo'), (20, 'a.cu'), (30, 'omp_parallel'),
            (31, 'omp_task'), (40, 'MPI_Send'), (41, 'MPI_Bcast'), (42, 'MPI_Init');
        CREATE TABLE OPENMP_EVENT_KIND_PARALLEL (start INTEGER, "end" INTEGER, nameId INTEGER);
        INSERT INTO OPENMP_EVENT_KIND_PARALLEL VALUES (0, 10, 30), (5, 25, 30);
        CREATE TABLE OPENMP_EVENT_KIND_TASK (start INTEGER, "end" INTEGER, nameId INTEGER);
        INSERT INTO OPENMP_EVENT_KIND_TASK VALUES (0, 40, 31);
    """)
    if um:
        con.executescript("""
            CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, "end" INTEGER, bytes INTEGER,
                copyKind INTEGER, virtualAddress INTEGER);
            INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (0, 10, 1000, 11, 4096), (0, 10, 3000, 12, 4096),
                (0, 0, 1234, 11, 16384), (0, 3, 2000, 12, 20480), (0, 99, 7, 1, NULL);
            CREATE TABLE CUDA_UM_CPU_PAGE_FAULT_EVENTS (start INTEGER, address INTEGER, CpuInstruction INTEGER,
                sourceFile INTEGER, sourceLine INTEGER);
            INSERT INTO CUDA_UM_CPU_PAGE_FAULT_EVENTS VALUES (0, 4096, 10, NULL, NULL), (1, 4096, 10, NULL, NULL),
                (2, 8192, 11, 20, 7);
            CREATE TABLE CUDA_UM_GPU_PAGE_FAULT_EVENTS (start INTEGER, "end" INTEGER, address INTEGER,
                numberOfPageFaults INTEGER);
            INSERT INTO CUDA_UM_GPU_PAGE_FAULT_EVENTS VALUES (0, 1, 4096, 3), (0, 1, 12288, 2), (0, 1, 12288, 1);
        """)
    if mpi:
        con.executescript(f"""
            CREATE TABLE MPI_RANKS (globalTid INTEGER, rank INTEGER);
            INSERT INTO MPI_RANKS VALUES ({G1}, 0);
            CREATE TABLE MPI_P2P_EVENTS (start INTEGER, "end" INTEGER, globalTid INTEGER, textId INTEGER,
                tag INTEGER, remoteRank INTEGER, size INTEGER);
            INSERT INTO MPI_P2P_EVENTS VALUES (100, 150, {G1}, 40, 3, 1, 2000000);
            CREATE TABLE MPI_COLLECTIVES_EVENTS (start INTEGER, "end" INTEGER, globalTid INTEGER, textId INTEGER,
                rootRank INTEGER, size INTEGER, recvSize INTEGER);
            INSERT INTO MPI_COLLECTIVES_EVENTS VALUES (100, 130, {G2}, 41, 0, 1000, NULL);
            CREATE TABLE MPI_OTHER_EVENTS (start INTEGER, "end" INTEGER, globalTid INTEGER, textId INTEGER);
            INSERT INTO MPI_OTHER_EVENTS VALUES (50, 50, {G1}, 42);
        """)
    con.commit()
    con.close()
    return path


def _csv(db: Path, report: str) -> list[str]:
    buf = io.StringIO()
    with Export(db) as export:
        write_csv(run_table(export, report), buf)
    return buf.getvalue().splitlines()


# the throughput is (DtoH + HtoD bytes) * (1000000000 / Σ duration) in SQL integers: 4096: 4000 B over
# 20 ns -> 4000 * 50000000; 20480: 2000 B over 3 ns -> 2000 * 333333333; 16384: 0 ns -> NULL (last)
UM_SUM = ["0x5000,,0.002,,,666666.666", "0x1000,0.001,0.003,2,3,200000.000", "0x2000,,,1,,", "0x3000,,,,3,",
          "0x4000,0.001,,,,"]


def test_unified_memory_reports_by_hand(tmp_path: Path) -> None:
    db = _export(tmp_path / "um.sqlite")
    assert _csv(db, "um_sum")[1:] == UM_SUM
    assert _csv(db, "unifiedmemory")[0].endswith(",Migration Throughput (MBps)")
    assert _csv(db, "unifiedmemory")[3:] == ["0x2000,None,None,1,None,None", "0x3000,None,None,None,3,None",
                                              "0x4000,0.001,None,None,None,None"]
    # HtoD 1000 + 1234 B, DtoH 3000 + 2000 B, 3 CPU faults, 3 + 2 + 1 GPU faults, addresses 0x1000 .. 0x5000
    assert _csv(db, "um_total_sum")[1:] == ["0.002,0.005,3,6,0x1000,0x5000"]
    assert _csv(db, "um_cpu_page_faults_sum") == ["CPU Page Faults,CPU Instruction Address,Source File,Source Line",
                                                  "2,main,,", "1,foo,a.cu,7"]
    assert _csv(db, "umcpupagefaults") == ["CPU Page Faults,CPU Instruction Address", "2,main", "1,foo"]


def test_openmp_and_mpi_reports_by_hand(tmp_path: Path) -> None:
    db = _export(tmp_path / "mpi.sqlite")
    # 40 of 70 ns: 57.1 %; omp_parallel 10 and 20 ns: mean 15, sample StdDev sqrt(50) = 7.07
    assert _csv(db, "openmp_sum")[1:] == ["57.1,40,1,40.0,40.0,40,40,0.0,omp_task",
                                          "42.9,30,2,15.0,15.0,10,20,7.1,omp_parallel"]
    assert _csv(db, "mpi_event_sum")[1:] == ["62.5,50,1,50.0,50.0,50,50,0.0,p2p,MPI_Send",
                                             "37.5,30,1,30.0,30.0,30,30,0.0,collectives,MPI_Bcast",
                                             "0.0,0,1,0.0,0.0,0,0,0.0,other,MPI_Init"]
    # by start; the two events at 100 ns in union order (p2p first); (7, 8) has no rank
    assert _csv(db, "mpi_event_trace")[1:] == ["50,50,0,MPI_Init,5,6,,0,,,,,",
                                               "100,150,50,MPI_Send,5,6,3,0,1,,2.000,,",
                                               "100,130,30,MPI_Bcast,7,8,,,,0,,0.001,"]


@pytest.mark.parametrize(("report", "missing"), [
    ("um_sum", "no CUDA memory transfers data"), ("unifiedmemorytotals", "no CUDA memory transfers data"),
    ("um_cpu_page_faults_sum", "no CUDA Unified Memory CPU page faults data"),
    ("mpi_event_sum", "no MPI event data"), ("mpi_event_trace", "no MPI rank data")])
def test_missing_tables_are_named(tmp_path: Path, report: str, missing: str) -> None:
    db = _export(tmp_path / "bare.sqlite", um=False, mpi=False)
    with Export(db) as export, pytest.raises(MissingData, match=missing):
        run_table(export, report)


def test_cli_skips_a_report_without_its_tables(tmp_path: Path) -> None:
    """A CPU-only export (no GPU operation at all, as an MPI/OpenMP program's): its reports are made,
    the others skipped with what they lack, exit 0 (as nsys stats)."""
    db = _export(tmp_path / "bare.sqlite", um=False, mpi=False)
    result = hpcprof("nsys", "stats", "-r", "um_sum,openmp_sum,mpi_event_trace", "--format", "csv", str(db),
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "um_sum skipped: no CUDA memory transfers data" in result.stderr
    assert "mpi_event_trace skipped: no MPI rank data" in result.stderr
    assert "Traceback" not in result.stderr and "omp_task" in result.stdout
    result = hpcprof("nsys", "stats", "-r", "mpi_event_sum,cuda_gpu_kern_sum", "--format", "csv",
                     str(_export(tmp_path / "mpi.sqlite", um=False)), cwd=tmp_path)
    assert result.returncode == 0 and "p2p,MPI_Send" in result.stdout, result.stderr
    assert "cuda_gpu_kern_sum skipped: no CUDA kernel data" in result.stderr
