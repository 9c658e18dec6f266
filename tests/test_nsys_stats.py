"""`hpcprof nsys stats` against the gold CSVs of the real `nsys stats` (byte for byte)."""

from __future__ import annotations

import gzip
import hashlib
import io
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from hpcprof.cli import main
from hpcprof.tools.nsys.stats.db import Export, pid_of, process_of, tid_of
from hpcprof.tools.nsys.stats.loaders import clean_api_names
from hpcprof.tools.nsys.stats.numerics import exact_round1_array, sqlite_round1_array
from hpcprof.tools.nsys.stats.schema import MissingData
from hpcprof.tools.nsys.stats.stats import REPORTS, run_report
from hpcprof.tools.nsys.stats.table import write_csv

NSYS = "nsys"
OLD_GOLD = "gold_nsys_stats_2022.4.2"
FIXTURES = ["fuser_report1_nsys2024.6.2", "fuser_report1_nsys2025.1.1", "nsysai_h100_2gpu_1s",
            "nsysai_mfu_2gpu_after", "nsysai_mfu_2gpu_before", "nsysai_mock"]
OLD_REPORTS = ["cudaapisum", "gpukernsum", "gpumemsizesum", "gpumemtimesum", "gpusum", "kernexecsum",
               "nvtxppsum", "nvtxsum"]
NEW_REPORTS = ["cuda_api_sum", "cuda_gpu_kern_sum", "cuda_gpu_mem_size_sum", "cuda_gpu_mem_time_sum", "nvtx_sum",
               "osrt_sum"]
# nsysai_mock has no NVTX: nsys 2022.4 skipped its nvtx reports, so there is no gold file
OLD_PAIRS = [(f, r) for f in FIXTURES for r in OLD_REPORTS if not (f == "nsysai_mock" and r.startswith("nvtx"))]
NEW_PAIRS = [(rank, r) for rank in ("rank0", "rank1") for r in NEW_REPORTS]


def gold_text(path: Path) -> str:
    if path.with_name(path.name + ".gz").exists():
        with gzip.open(path.with_name(path.name + ".gz"), "rt", newline="") as fh:
            return fh.read()
    return path.read_text()


def report_csv(db: Path, report: str) -> str:
    with Export(db) as export:
        buf = io.StringIO()
        write_csv(run_report(export, report), buf)
    return buf.getvalue()


@pytest.mark.parametrize(("fixture", "report"), OLD_PAIRS, ids=[f"{f}-{r}" for f, r in OLD_PAIRS])
def test_old_layout_matches_nsys_2022_4_gold(fixtures_dir: Path, fixture: str, report: str) -> None:
    nsys = fixtures_dir / NSYS
    expected = gold_text(nsys / OLD_GOLD / f"{fixture}_{report}.csv")
    assert report_csv(nsys / f"{fixture}.sqlite", report) == expected


@pytest.mark.parametrize(("rank", "report"), NEW_PAIRS, ids=[f"{k}-{r}" for k, r in NEW_PAIRS])
def test_new_layout_matches_nsys_2025_3_gold(fixtures_dir: Path, rank: str, report: str) -> None:
    run = fixtures_dir / NSYS / "h200_seqpar_bf16"
    assert report_csv(run / f"{rank}.sqlite", report) == (run / f"{rank}_{report}.csv").read_text()


FRESH_GOLD = "gold_nsys_stats_2025.3.1"   # benchmarks/gpu/nsys_gold.sh on the exports in h200_campaign/
FRESH_EXPORTS = ["ddp_ws1_rank0", "ddp_ws2_rank0", "ddp_ws2_rank1", "seqpar_bf16_p4_rank3", "seqpar_fp32_p2_rank1"]
FRESH_PAIRS = [(e, r) for e in FRESH_EXPORTS for r in sorted(n for n in REPORTS if "_" in n)]


@pytest.mark.parametrize(("export", "report"), FRESH_PAIRS, ids=[f"{e}-{r}" for e, r in FRESH_PAIRS])
def test_every_current_report_matches_nsys_2025_3_1_on_fresh_h200_exports(fixtures_dir: Path, export: str,
                                                                        report: str) -> None:
    """The 4x H200 campaign's exports (seqpar fp32/bf16, Echo GPT-2 DDP), `nsys stats` 2025.3.1 run on
    the GPU machine: every current-layout report byte for byte (ties, `MB/s`, empty reports); where
    nsys skipped a report or found no rows (an empty file: e.g. no unified memory, OpenMP or MPI data)
    ours is MissingData or empty."""
    nsys = fixtures_dir / NSYS
    gold = (nsys / FRESH_GOLD / f"{export}_{report}.csv").read_text()
    db = nsys / "h200_campaign" / f"{export}.sqlite"
    try:
        mine = report_csv(db, report)
    except MissingData:
        mine = ""
    assert mine == gold


# Outputs of the real nsys 2022.4.2 (`nsys stats --format csv`) on fixtures for which the shared
# gold set has no file; small enough to keep here.
MOCK_GPUTRACE = """\
Start (ns),Duration (ns),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem (MB),DymSMem (MB),Bytes (MB),\
Throughput (MBps),SrcMemKd,DstMemKd,Device,Ctx,Strm,Name
1517727052,1440,143,1,1,1,128,1,1,16,0.000,0.000,None,,None,None,NVIDIA GeForce RTX 3080 (0),1,7,"void at::native::\
vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>, std::array<char *, (unsigned long)1>>(int, T2, T3)"
1535979030,2689,159,1,1,1,16,1,1,28,0.000,0.000,None,,None,None,NVIDIA GeForce RTX 3080 (0),1,7,"void at::native::\
reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor\
<float, float, float>::operator ()(at::TensorIterator &)::[lambda(float, float) (instance 1)]>, unsigned int, float, \
(int)4>>(T3)"
1540178479,1632,171,None,None,None,None,None,None,None,None,None,0.000,2.451,Device,Pinned,NVIDIA GeForce RTX 3080 (0),\
1,7,[CUDA memcpy DtoH]
"""
H200_RANK0_OSRTSUM = """\
Time (%),Total Time (ns),Num Calls,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name
100.0,100110903,1,100110903.0,100110903.0,100110903,100110903,0.0,pthread_cond_timedwait
"""
H200_RANK0_GPUTRACE_MD5 = "fb6f799d25955a7ee44fd965aa7bfb07"   # 30 rows: kernels + memsets


def test_gputrace_and_osrtsum_match_nsys_2022_4(fixtures_dir: Path) -> None:
    nsys = fixtures_dir / NSYS
    assert report_csv(nsys / "nsysai_mock.sqlite", "gputrace") == MOCK_GPUTRACE
    assert report_csv(nsys / "h200_seqpar_bf16" / "rank0.sqlite", "osrtsum") == H200_RANK0_OSRTSUM
    trace = report_csv(nsys / "h200_seqpar_bf16" / "rank0.sqlite", "gputrace")
    assert hashlib.md5(trace.encode()).hexdigest() == H200_RANK0_GPUTRACE_MD5


@pytest.mark.parametrize("fixture", FIXTURES)
def test_kern_sum_equals_the_kernel_rows_of_gpusum(fixtures_dir: Path, fixture: str) -> None:
    """Today's cuda_gpu_kern_sum groups by name only: the CUDA_KERNEL rows of nsys 2022.4's gpusum
    (analysis_formats.md §2.1), Time % recomputed over kernels."""
    nsys = fixtures_dir / NSYS
    gold = pd.read_csv(nsys / OLD_GOLD / f"{fixture}_gpusum.csv", keep_default_na=False)
    gold = gold[gold["Category"] == "CUDA_KERNEL"].drop(columns=["Category", "Time (%)"])
    with Export(nsys / f"{fixture}.sqlite") as export:
        ours = run_report(export, "cuda_gpu_kern_sum")
    ours = ours.rename(columns={"Name": "Operation"}).drop(columns="Time (%)")
    key = ["Operation"]
    merged = gold.merge(ours, on=key, suffixes=("_gold", ""), validate="one_to_one")
    assert len(merged) == len(gold) == len(ours)
    for col in ["Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)"]:
        np.testing.assert_allclose(merged[col].astype(float), merged[f"{col}_gold"].astype(float), atol=0.051)
    totals = ours["Total Time (ns)"].to_numpy()
    assert (np.diff(totals) <= 0).all()



@pytest.fixture(scope="module")
def extra_exports(fixtures_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Generated exports with unified memory, OpenMP and MPI tables (tests/differential/nsys_extra_exports.py)."""
    sys.path.insert(0, str(Path(__file__).parent / "differential"))
    from nsys_extra_exports import FIRST_SEED, derive_extra

    work = tmp_path_factory.mktemp("extra")
    return [derive_extra(seed, fixtures_dir, work) for seed in range(FIRST_SEED, FIRST_SEED + 10)]

@pytest.mark.slow
@pytest.mark.parametrize("report", sorted(REPORTS))
def test_every_report_runs_on_every_fixture_with_sane_totals(fixtures_dir: Path, extra_exports: list[Path],
                                                            report: str) -> None:
    """Invariants where no gold exists: Time % sums to ~100, rows sorted by total, counts positive
    (the unified memory, OpenMP and MPI reports on generated exports: no fixture has that data)."""
    files = sorted((fixtures_dir / NSYS).glob("*.sqlite")) + sorted((fixtures_dir / NSYS / "h200_seqpar_bf16").glob("*.sqlite"))
    files += extra_exports
    ran = 0
    for db in files:
        with Export(db) as export:
            try:
                df = run_report(export, report)
            except MissingData:
                continue
        ran += 1
        assert len(df.columns) == len(df.attrs["formats"])
        if "Time (%)" in df and len(df):
            assert abs(df["Time (%)"].sum() - 100.0) <= 0.05 * len(df) + 0.1
            assert (np.diff(df["Total Time (ns)"].to_numpy(np.int64)) <= 0).all()
        if "Start (ns)" in df:
            assert (np.diff(df["Start (ns)"].to_numpy(np.int64)) >= 0).all()
    assert ran > 0


def test_new_layout_labels_and_names(fixtures_dir: Path) -> None:
    nsys = fixtures_dir / NSYS
    with Export(nsys / "nsysai_mfu_2gpu_before.sqlite") as export:
        mem = run_report(export, "cuda_gpu_mem_time_sum")
        old = run_report(export, "gpumemtimesum")
        gb = run_report(export, "cuda_gpu_kern_gb_sum")
        gk = run_report(export, "gpukernsum")
        startend = run_report(export, "nvtx_startend_sum")
        pushpop = run_report(export, "nvtx_pushpop_sum")
        both = run_report(export, "nvtx_sum")
    assert set(mem["Operation"]) == {"[CUDA memcpy Device-to-Device]", "[CUDA memcpy Host-to-Device]", "[CUDA memset]"}
    assert mem["Total Time (ns)"].tolist() == old["Total Time (ns)"].tolist()
    assert sorted(gb["Total Time (ns)"]) == sorted(gk["Total Time (ns)"])
    assert all(":" in name for name in pushpop["Range"])          # `domain:range`, empty default domain
    assert pushpop["Instances"].sum() + startend["Instances"].sum() == both["Instances"].sum()


def test_sqlite_rounding_of_both_nsys_generations() -> None:
    x = np.array([9735.55, 0.25, 0.15, 2.5e-2, 1234.75, 0.0, np.nan, 14_351_679 / 60, 214_110 / 24])
    # SQLite 3.36 (nsys 2022.4): long-double printf with a 3e-16 fudge
    np.testing.assert_array_equal(sqlite_round1_array(x)[:7], [9735.6, 0.3, 0.2, 0.0, 1234.8, 0.0, np.nan])
    # nsys 2025.3.1: the exact binary value, half away from zero (239194.65 is 239194.6499..., 8921.25 exact)
    np.testing.assert_array_equal(exact_round1_array(x), [9735.5, 0.3, 0.1, 0.0, 1234.8, 0.0, np.nan, 239194.6, 8921.3])


def test_api_name_cleanup() -> None:
    names = np.array(["cudaLaunchKernel_v7000", "cudaStreamIsCapturing_v10000", "cuLaunchKernelEx", "_v1234", None],
                     dtype=object)
    assert clean_api_names(names).tolist() == ["cudaLaunchKernel", "cudaStreamIsCapturing_v10000", "cuLaunchKernelEx",
                                              "", None]


def test_export_metadata_ids_and_read_only(fixtures_dir: Path) -> None:
    db = fixtures_dir / NSYS / "h200_seqpar_bf16" / "rank0.sqlite"
    before = hashlib.md5(db.read_bytes()).hexdigest()
    with Export(db) as export:
        assert export.version == "2025.3.2.0"
        assert export.schema_version == (3, 20, 3)
        assert not export.has("CUPTI_ACTIVITY_KIND_MEMCPY") and export.has("OSRT_API")
        gtid = 281503078549131           # an NVTX thread of this file
        assert int(pid_of(np.array([gtid]))[0]) == 1675
        assert int(process_of(np.array([gtid]))[0]) == gtid & ~0xFFFFFF
        assert int(tid_of(np.array([gtid]))[0]) == gtid & 0xFFFFFF
    assert hashlib.md5(db.read_bytes()).hexdigest() == before
    assert not db.with_name(db.name + "-journal").exists() and not db.with_name(db.name + "-wal").exists()


def test_nvtx_names_from_text_and_textid(fixtures_dir: Path) -> None:
    """nsysai_mfu_2gpu_before mixes inline `text` (18,656 ranges) and `textId` (NCCL ranges; the
    time-sliced file has no domain-create rows, so no `NCCL:` prefix)."""
    with Export(fixtures_dir / NSYS / "nsysai_mfu_2gpu_before.sqlite") as export:
        df = run_report(export, "nvtxppsum")
    ranges = set(df["Range"])
    assert {"ncclSend", "ncclRecv", "ncclGroupStart"} <= ranges
    assert any(r.startswith("aten::") for r in ranges)


def test_cli_csv_is_byte_identical_and_output_prefix(fixtures_dir: Path, tmp_path: Path) -> None:
    nsys = fixtures_dir / NSYS
    runner = CliRunner()
    res = runner.invoke(main, ["nsys", "stats", str(nsys / "nsysai_mock.sqlite"), "--report", "gpukernsum",
                               "--format", "csv"])
    assert res.exit_code == 0, res.output
    assert res.stdout == (nsys / OLD_GOLD / "nsysai_mock_gpukernsum.csv").read_text()
    prefix = tmp_path / "out" / "h200"
    run = nsys / "h200_seqpar_bf16"
    res = runner.invoke(main, ["nsys", "stats", str(run / "rank1.sqlite"), "-r", "cuda_gpu_kern_sum,cuda_api_sum",
                               "--format", "csv", "--output", str(prefix)])
    assert res.exit_code == 0, res.output
    for report in ("cuda_gpu_kern_sum", "cuda_api_sum"):
        assert Path(f"{prefix}_{report}.csv").read_text() == (run / f"rank1_{report}.csv").read_text()


@pytest.mark.parametrize("fmt", ["json", "table"])
def test_cli_json_and_table(fixtures_dir: Path, fmt: str) -> None:
    res = CliRunner().invoke(main, ["nsys", "stats", str(fixtures_dir / NSYS / "nsysai_mock.sqlite"),
                                    "-r", "cuda_gpu_kern_sum", "--format", fmt])
    assert res.exit_code == 0, res.output
    if fmt == "json":
        rows = pd.read_json(io.StringIO(res.stdout))
        assert rows["Total Time (ns)"].tolist() == [2689, 1440]
    else:
        assert "reduce_kernel" in res.stdout and "2,689" in res.stdout   # nsys's table style


def test_cli_rejects_unknown_report(fixtures_dir: Path) -> None:
    res = CliRunner().invoke(main, ["nsys", "stats", str(fixtures_dir / NSYS / "nsysai_mock.sqlite"),
                                    "-r", "gpukernsum,nope"])
    assert res.exit_code == 2
    assert "nope" in res.output


def _ddp_gold(gpu_data: Path) -> list[Path]:
    return sorted((gpu_data / "run3" / "nsys").glob("*_rank*_*_sum.csv"))


DDP_REPORTS = ("cuda_gpu_kern_sum", "nvtx_sum")


def test_ddp_gpt2_exports_match_nsys_2025_3_gold(gpu_data: Path) -> None:
    """The GPT-2 DDP run of benchmarks/gpu (its copy in tests/fixtures/gpu: nsys 2025.3.1 CSVs next to each export)."""
    compared = 0
    for gold in _ddp_gold(gpu_data):
        report = next((r for r in DDP_REPORTS if gold.name.endswith(f"_{r}.csv")), None)
        if report is None:
            continue
        db = gold.with_name(gold.name.removesuffix(f"_{report}.csv") + ".sqlite")
        assert report_csv(db, report) == gold.read_text(), gold.name
        compared += 1
    assert compared == 10


def test_kern_gb_sum_ties_follow_each_nsys_group_by(fixtures_dir: Path, tmp_path: Path) -> None:
    """Equal totals, counts and names, grids 13000 and 2048: nsys 2022.4 groups by the grid
    text ("13000" < "2048"), nsys 2024+ by gridX as a number (2048 first). Checked against
    nsys itself by the differential tests (exports with ties, seeds from nsys_exports.TIE_SEEDS)."""
    import shutil
    import sqlite3

    db = tmp_path / "ties.sqlite"
    shutil.copyfile(fixtures_dir / NSYS / "nsysai_mock.sqlite", db)
    con = sqlite3.connect(db)
    name = con.execute("SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchone()[0]
    rows = [r[0] for r in con.execute("SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid")]
    assert len(rows) == 2
    con.executemany('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = ?, gridX = ?, gridY = 1, gridZ = 1, '
                    '"end" = start + 500 WHERE rowid = ?', [(name, 2048, rows[0]), (name, 13000, rows[1])])
    con.commit()
    con.close()
    with Export(db) as export:
        new = run_report(export, "cuda_gpu_kern_gb_sum")["GridXYZ"].tolist()
        old = run_report(export, "gpukernsum")["GridXYZ"].tolist()
    assert new == ["2048    1    1", "13000    1    1"]
    assert old == ["13000    1    1", "2048    1    1"]
