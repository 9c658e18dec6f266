"""Bus bandwidth per collective and message size (hpcprof.analysis.busbw): the Kineto path by hand
from the raw JSON and against AMD TraceLens' NcclAnalyser (its gold, tests/differential/tracelens_busbw.py),
the nsys path on the committed exports (no NVTX payloads: sizes unknown, and why)."""

from __future__ import annotations

import gzip
import json
import math
import sqlite3
import statistics
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hpcprof.analysis import busbw
from hpcprof.tools.nsys import tables as nt
from hpcprof.tools.torch import tables as tt
from hpcprof.tools.torch.analysis.collect import TorchCollector, busbw_across_ranks
from hpcprof.tools.torch.analysis.collectives import TraceCollectives
from hpcprof.tools.torch.analysis.load import gather

HTA = Path(__file__).parent / "fixtures" / "hta"
GOLD = Path(__file__).parent / "fixtures" / "tracelens" / "busbw_gold.csv"
#: TraceLens' GB/s are GiB/s (2^30 bytes/s), its MB MiB; hpcprof's GB/s are 1e9 bytes/s
GIB = 2**30


def _trace(fixture: str, rank: int) -> Path:
    return HTA / fixture / f"rank{rank}.pt.trace.json.gz"


def _instances(fixture: str, rank: int) -> pd.DataFrame:
    got = TraceCollectives()
    gather(_trace(fixture, rank), got)
    return got.instances(rank)


def _table(fixture: str) -> pd.DataFrame:
    """torch_busbw of a fixture's two ranks as collect makes it (each rank's file, then the reducer)."""
    tool = TorchCollector()
    per = pd.concat([tool.analyse_file(_trace(fixture, r), r)[tt.BUSBW.key] for r in (0, 1)], ignore_index=True)
    lines: list[str] = []
    return busbw_across_ranks(lambda name: per if name == tt.BUSBW.key else None, lines.append)[tt.BUSBW.key]


def test_ddp_all_reduce_by_hand() -> None:
    """DDP's fp32 all-reduce buckets (h200_ddp_gpt2) from the raw JSON: bytes = In msg nelems × 4
    (Float), busbw = median bytes / median kernel time · 2(n−1)/n per power-of-two bucket, over the kernels
    whose midpoint is in the rank's window; the kernels without sizes counted apart."""
    tool = TorchCollector()
    for rank in (0, 1):
        tables = tool.analyse_file(_trace("h200_ddp_gpt2", rank), rank)
        window, table = tables[tt.WINDOW.key].iloc[0], tables[tt.BUSBW.key]
        events = json.loads(gzip.decompress(_trace("h200_ddp_gpt2", rank).read_bytes()))["traceEvents"]
        kernels = [e for e in events if e.get("cat") == "kernel" and e["name"].startswith("nccl")]
        inside = [e for e in kernels
                  if window["start_ns"] <= (e["ts"] + e["dur"] / 2) * 1000 <= window["end_ns"]]
        sized = [e for e in inside if e["args"].get("Collective name") == "allreduce"]
        assert {e["args"]["dtype"] for e in sized} == {"Float"} and {e["args"]["Group size"] for e in sized} == {2}
        by_bucket: dict[int, list[tuple[int, float]]] = {}
        for e in sized:
            nbytes = e["args"]["In msg nelems"] * 4
            by_bucket.setdefault(1 << (nbytes.bit_length() - 1), []).append((nbytes, e["dur"] * 1000))
        rows = table[table["bucket_lo"].notna()].set_index("bucket_lo")
        assert sorted(rows.index) == sorted(by_bucket)
        for lo, got in by_bucket.items():
            row = rows.loc[lo]
            assert row["collective"] == "AllReduce" and row["group"] == "0 [0, 1]" and row["count"] == len(got)
            assert row["total_bytes"] == sum(b for b, _ in got)
            assert row["median_ns"] == pytest.approx(statistics.median(t for _, t in got), abs=1)
            alg = statistics.median(b for b, _ in got) / statistics.median(t for _, t in got)  # bytes/ns = GB/s
            assert row["algbw_gbps"] == pytest.approx(alg, rel=1e-3)
            assert row["busbw_gbps"] == pytest.approx(alg * 2 * (2 - 1) / 2, rel=1e-3)
        unknown = table[table["bucket"] == busbw.SIZES_UNKNOWN]
        no_sizes = len(inside) - len(sized) - sum(e["args"].get("Collective name") == "barrier" for e in inside)
        assert (unknown["count"].sum() if len(unknown) else 0) == no_sizes
        if no_sizes:
            assert "carry no record_param_comms sizes" in unknown["note"].iloc[0]


@pytest.mark.slow
def test_across_ranks_names_the_slowest_and_fastest_rank() -> None:
    """The rows across ranks: counts summed, the rank of the lowest and highest median busbw, the skew."""
    table = _table("h200_ddp_gpt2_bf16")
    per, every = table[table["scope"] == "rank"], table[table["scope"] == "all"]
    assert len(every) == per.groupby(["group", "collective", "bucket"]).ngroups > 0
    for _, row in every.iterrows():
        mine = per[(per["bucket"] == row["bucket"]) & (per["collective"] == row["collective"])]
        assert row["count"] == mine["count"].sum()
        slow, fast = mine.loc[mine["busbw_gbps"].idxmin()], mine.loc[mine["busbw_gbps"].idxmax()]
        assert (row["slowest_rank"], row["fastest_rank"]) == (slow["rank"], fast["rank"])
        assert row["skew_pct"] == pytest.approx(100 * (fast["busbw_gbps"] / slow["busbw_gbps"] - 1), rel=1e-3)


@pytest.mark.parametrize("fixture", ["h200_ddp_gpt2", "h200_ddp_gpt2_bf16", "h200_seqpar_bf16"])
def test_sizes_and_busbw_agree_with_tracelens(fixture: str) -> None:
    """Each collective TraceLens matches across ranks (by process group and order): the same type and
    message bytes, and the same busbw from the same time (its comm_latency: the fastest rank's
    kernel); the per-rank medians of hpcprof's table equal TraceLens' per-rank numbers."""
    gold = pd.read_csv(GOLD)
    gold = gold[gold["fixture"] == fixture].reset_index(drop=True)
    assert len(gold)
    inst = {r: _instances(fixture, r) for r in (0, 1)}
    mine = {r: inst[r][inst[r]["group"].notna()].sort_values("start_ns", kind="stable").reset_index(drop=True)
            for r in (0, 1)}
    assert len(mine[0]) == len(mine[1]) == len(gold)
    for i, row in gold.iterrows():
        kind = busbw.collective_type(row["Collective name"])
        assert {mine[r].loc[i, "collective"] for r in (0, 1)} == {kind}
        assert mine[0].loc[i, "bytes"] == mine[1].loc[i, "bytes"] == row["Full msg size (MB)"] * 2**20
        fastest = min(mine[r].loc[i, "end_ns"] - mine[r].loc[i, "start_ns"] for r in (0, 1))
        assert fastest == pytest.approx(row["comm_latency"] * 1000, abs=2)     # ns: ts and end rounded apart
        bus = mine[0].loc[i, "bytes"] / fastest * busbw.factor(kind, row["Group size"])
        assert bus == pytest.approx(row["bus bw (GB/s)"] * GIB / 1e9, rel=1e-4)
    for r in (0, 1):                      # the table's per-rank medians, over the whole trace
        table = busbw.rank_table(mine[r], {r: "capture"}).set_index(["collective", "bucket_lo"])
        gold["kind"] = gold["Collective name"].map(busbw.collective_type)
        gold["lo"] = busbw.buckets(gold["Full msg size (MB)"].to_numpy() * 2**20)[0]
        for (kind, lo), g in gold.groupby(["kind", "lo"]):
            factor = g["bus bw (GB/s)"] / g["algo bw (GB/s)"]           # TraceLens' own factor
            theirs = (g["Full msg size (MB)"] * 2**20).median() / (g[f"rank_{r}_dur"] * 1000).median() \
                * factor.median()
            assert table.loc[(kind, lo), "busbw_gbps"] == pytest.approx(theirs, rel=1e-3)
            assert table.loc[(kind, lo), "count"] == len(g)


def test_collective_names_and_factors() -> None:
    """PyTorch's and NCCL's spellings name one type; nccl-tests' factors."""
    assert [busbw.collective_type(n) for n in ("allreduce", "_allgather_base", "_reduce_scatter_base",
                                               "ncclAllReduce", "ncclReduceScatter", "all_to_all", "ncclSend",
                                               "barrier", "ncclGroupStart")] == \
        ["AllReduce", "AllGather", "ReduceScatter", "AllReduce", "ReduceScatter", "AllToAll", "SendRecv",
         "Barrier", None]
    assert [busbw.factor(k, 8) for k in ("AllReduce", "AllGather", "ReduceScatter", "AllToAll", "Broadcast")] == \
        [1.75, 0.875, 0.875, 0.875, 1.0]
    assert math.isnan(busbw.factor("AllReduce", math.nan))
    lo, hi = busbw.buckets(np.array([3 << 20, 2.0**40 - 0.5, 1.0, 0.5, 0.0, math.nan, -1.0]))
    assert lo.tolist() == [2 << 20, 2**39, 1, 0, 0, -1, -1] and hi.tolist() == [4 << 20, 2**40, 2, 1, 1, -1, -1]
    assert busbw.bucket_label(2 << 20, 4 << 20) == "2-4 MiB"


# -- nsys --------------------------------------------------------------------------------------------

def test_nsys_without_payloads_says_sizes_unknown(fixtures_dir: Path) -> None:
    """The committed DDP exports have NCCL's payload schemas but no payloads (exported without
    --include-blobs): every NCCL kernel of the window is counted, its size unknown, the note says why."""
    from hpcprof.tools.nsys.analysis.collect import NsysCollector
    from hpcprof.tools.nsys.analysis.collectives import without_payloads

    tool = NsysCollector()
    per = []
    for rank in (0, 1):
        path = fixtures_dir / "nsys" / "h200_campaign" / f"ddp_ws2_rank{rank}.sqlite"
        assert without_payloads(path)
        tables = tool.analyse_file(path, rank)
        window, table = tables[nt.WINDOW.key].iloc[0], tables[nt.BUSBW.key]
        with sqlite3.connect(path) as db:
            kernels = db.execute(
                "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName "
                "WHERE s.value LIKE 'nccl%' AND (k.start + k.end) / 2.0 BETWEEN ? AND ?",
                (int(window["start_ns"]), int(window["end_ns"]))).fetchone()[0]
        assert kernels > 0
        assert table["bucket"].tolist() == [busbw.SIZES_UNKNOWN] and table["count"].tolist() == [kernels]
        assert table["busbw_gbps"].isna().all() and "--include-blobs=true" in table["note"].iloc[0]
        per.append(table)
    lines: list[str] = []
    joined = pd.concat(per, ignore_index=True)
    out = tool.reduce(lambda name: joined if name == nt.BUSBW.key else None, lines.append)[nt.BUSBW.key]
    assert out[out["scope"] == "all"]["count"].tolist() == [joined["count"].sum()]
    assert any(line.startswith("busbw: ") and "--include-blobs" in line for line in lines)


def test_export_asks_for_payloads_only_where_nsys_has_the_option(tmp_path: Path) -> None:
    """`nsys export --include-blobs true` where `nsys export --help` names it; 2022.4 has no such option."""
    from hpcprof.tools.nsys.analysis.collect import export_options

    newer = tmp_path / "nsys"
    newer.write_text("#!/bin/sh\necho '  --include-blobs=  Include binary blobs'\n")
    newer.chmod(0o755)
    assert export_options(str(newer)) == ("--include-blobs", "true")
    site = Path("/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys")     # tests/services/nsys.sh
    if not site.exists():
        pytest.skip("nsys 2022.4 not installed (tests/services/nsys.sh)")
    assert "2022.4" in subprocess.run([str(site), "--version"], capture_output=True, text=True).stdout
    assert export_options(str(site)) == ()


# -- collect and report ------------------------------------------------------------------------------

@pytest.mark.slow
def test_collect_writes_torch_busbw_and_both_reports_show_it(repo: Path, gpu_data: Path, tmp_path: Path) -> None:
    """The GPT-2 DDP torch run of tests/fixtures/gpu/run3 rendered, collected and reported: torch_busbw
    with the rows across ranks, its short table in the terminal report and in the HTML report."""
    from hpcprof_cli import hpcprof
    from test_report_html import gpu_run

    from hpcprof.run.results import read_table

    data = gpu_data / "run3"
    hpcprof("render", str(repo / "examples" / "ddp_slowdown.yaml"), "--site", "polaris", "--set",
            "resources.account=PROJECT", "-o", "t", "--set", "sweep={}", "--set", "profile.tool=torch", "--set",
            "resources.ranks_per_node=2", "--set", "workload.args.world_size=2", cwd=tmp_path, check=True)
    work = tmp_path / "runs"
    run = gpu_run(work, tmp_path / "t", "20261121-000001-70c470", "torch",
                  {f"rank{r}.pt.trace.json.gz": data / "torch" / f"rank{r}.pt.trace.json.gz" for r in (0, 1)},
                  data / "ddp" / "torch_p2" / "ddp_steps.json")
    hpcprof("collect", "--workdir", str(work), cwd=tmp_path, check=True)
    table = read_table(run, tt.BUSBW.name)
    assert table is not None and set(table["scope"]) == {"rank", "all"}
    every = table[table["scope"] == "all"]
    assert (every["collective"] == "AllReduce").any() and every["busbw_gbps"].notna().any()
    assert sorted(table.loc[table["scope"] == "rank", "rank"].unique()) == [0, 1]
    text = hpcprof("report", "20261121-000001-70c470", "--workdir", str(work), cwd=tmp_path, check=True,
                   env={"COLUMNS": "250"}).stdout
    assert "bus bandwidth per collective and message size (measured window)" in text and "AllReduce" in text
    html = tmp_path / "r.html"
    hpcprof("report", "20261121-000001-70c470", "--html", str(html), "--workdir", str(work), cwd=tmp_path, check=True)
    assert "bus bandwidth per collective and message size (measured window)" in html.read_text()


#: the real 2×H200 DDP export with NCCL's NVTX payloads (tests/fixtures/SOURCES.md §9): DDP's own
#: bucket_sizes, the bytes every step all-reduces (4 × nn.Linear(2048, 2048) fp32 parameters)
DDP_STEP_BYTES, DDP_STEPS = 4 * (2048 * 2048 + 2048) * 4, 12


def _nccl_ranges_by_hand(path: Path) -> list[tuple[str, int, int]]:
    """(range name, message bytes, its kernel's duration ns) of each NCCL collective range, read
    with sqlite3 and struct: the blob's payload (u64 count; schema id, size, offset), the schema's
    `Message size [bytes]` offset, the kernel whose CUDA launch is inside the range on its thread."""
    import struct

    with sqlite3.connect(path) as db:
        offsets = {(schema, name): offset or 0 for schema, name, offset in db.execute(
            "SELECT schemaId, name, offset FROM NVTX_PAYLOAD_SCHEMA_ENTRIES")}
        rows = db.execute(
            "SELECT s.value, e.binaryData, k.end - k.start FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
            "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid = e.globalTid AND r.start BETWEEN e.start AND e.end "
            "JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId "
            "WHERE s.value IN ('ncclAllReduce', 'ncclBroadcast', 'ncclAllGather') ORDER BY e.start").fetchall()
    out = []
    for name, blob, ns in rows:
        count, schema, size, at = struct.unpack_from("<QQQQ", blob, 0)
        assert count == 1 and at + size <= len(blob)
        nbytes = struct.unpack_from("<Q", blob, at + offsets[(schema, "Message size [bytes]")])[0]
        out.append((name, nbytes, ns))
    return out


def test_nsys_ddp_all_reduce_by_hand(fixtures_dir: Path) -> None:
    """The DDP export with payloads: every step all-reduces DDP's buckets once (Σ bytes = 12 × the
    model's 67,141,632 parameter bytes), and per bucket the median kernel time and busbw
    (bytes / time · 2(n−1)/n, n = 2 from ncclCommInitRankConfig's payload) as computed by hand."""
    from hpcprof.tools.nsys.analysis.collect import NsysCollector

    tool = NsysCollector()
    per = []
    for rank in (0, 1):
        path = fixtures_dir / "nsys" / "ddp_blobs" / f"rank{rank}.sqlite"
        tables = tool.analyse_file(path, rank)
        table, window = tables[nt.BUSBW.key], tables[nt.WINDOW.key].iloc[0]
        assert window["iterations"] == DDP_STEPS and (table["note"] == "").all()
        assert table["group_size"].tolist() == [2] * len(table) and table["group"].str.startswith("comm 0x").all()
        hand = [r for r in _nccl_ranges_by_hand(path) if r[0] == "ncclAllReduce"]
        assert sum(b for _, b, _ in hand) == DDP_STEPS * DDP_STEP_BYTES
        reduce = table[table["collective"] == "AllReduce"].set_index("bucket_lo")
        assert reduce["total_bytes"].sum() == DDP_STEPS * DDP_STEP_BYTES and reduce["count"].sum() == len(hand)
        for lo, row in reduce.iterrows():
            mine = [(b, ns) for _, b, ns in hand if lo <= b < 2 * lo]
            assert row["count"] == len(mine) and row["bytes"] == statistics.median(b for b, _ in mine)
            assert row["median_ns"] == statistics.median(ns for _, ns in mine)
            alg = statistics.median(b for b, _ in mine) / statistics.median(ns for _, ns in mine)
            assert row["busbw_gbps"] == pytest.approx(alg * 2 * 1 / 2, abs=1e-4)
        per.append(table)
    joined = pd.concat(per, ignore_index=True)
    out = tool.reduce(lambda name: joined if name == nt.BUSBW.key else None, [].append)[nt.BUSBW.key]
    every = out[(out["scope"] == "all") & (out["collective"] == "AllReduce")]
    for _, row in every.iterrows():
        ranks = joined[(joined["collective"] == "AllReduce") & (joined["bucket"] == row["bucket"])]
        assert row["slowest_busbw_gbps"] == ranks["busbw_gbps"].min() and row["fastest_busbw_gbps"] == ranks["busbw_gbps"].max()


def test_an_export_without_payloads_beside_its_report_is_made_again(fixtures_dir: Path, tmp_path: Path) -> None:
    """`nsys profile --export=sqlite` keeps no NVTX payloads: where the site's nsys has --include-blobs
    (here a stand-in that says so and copies the export with payloads), collect exports the report
    again with them; the export beside it is used where the site's nsys cannot."""
    import shutil

    from hpcprof.analysis.collector import CollectContext
    from hpcprof.tools.nsys.analysis.collect import sqlite_files

    beside = tmp_path / "rank0.sqlite"
    shutil.copy(fixtures_dir / "nsys" / "h200_campaign" / "ddp_ws2_rank0.sqlite", beside)
    rep = tmp_path / "rank0.nsys-rep"
    rep.write_bytes(b"read by the stand-in only")
    newer = tmp_path / "nsys"
    newer.write_text('#!/bin/sh\n[ "$2" = --help ] && { echo "  --include-blobs=  Include binary blobs"; exit 0; }\n'
                     '[ "$6 $7" = "--include-blobs true" ] || exit 3\n'
                     f'cp "{fixtures_dir / "nsys" / "ddp_blobs" / "rank0.sqlite"}" "$9"\n')
    newer.chmod(0o755)
    problems: list[object] = []
    ctx = CollectContext(run_dir=tmp_path, tool="nsys", files=[str(beside), str(rep)],
                         rank_of={str(beside): 0, str(rep): 0}, work_dir=tmp_path / "work", problem=problems.append)
    assert sqlite_files(ctx, {"nsys": str(newer)}) == {str(tmp_path / "work" / "rank0.sqlite"): 0} and not problems
    old = tmp_path / "nsys-2022.4"
    old.write_text('#!/bin/sh\necho "  -t, --type="\n')
    old.chmod(0o755)
    assert sqlite_files(ctx, {"nsys": str(old)}) == {str(beside): 0}


def _agree(table: pd.DataFrame) -> None:
    """Every sized row's columns agree: bytes / median_ns = algbw, algbw · nccl-tests' factor = busbw
    (the table that printed 27 MiB in 2,279 µs as 122 GB/s broke the first)."""
    sized = table[table["bytes"].notna() & table["median_ns"].notna() & table["group_size"].notna()]
    assert len(sized) and (sized["scope"] == "all").any() and (sized["scope"] == "rank").any()
    for _, row in sized.iterrows():
        assert row["algbw_gbps"] == pytest.approx(row["bytes"] / row["median_ns"], rel=1e-3, abs=1e-4)
        want = row["algbw_gbps"] * busbw.factor(row["collective"], row["group_size"])
        assert row["busbw_gbps"] == pytest.approx(want, rel=1e-3, abs=1e-4)


def _csv(args: list[str]) -> pd.DataFrame:
    from io import StringIO

    from click.testing import CliRunner

    from hpcprof.cli import main

    res = CliRunner().invoke(main, [*args, "--format", "csv"])
    assert res.exit_code == 0, res.output
    return pd.read_csv(StringIO(res.stdout), keep_default_na=False, na_values=[""])


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["h200_ddp_gpt2", "h200_ddp_gpt2_bf16", "h200_seqpar_bf16"])
def test_trace_nccl_is_collects_table_and_its_columns_agree(fixture: str) -> None:
    """`hpcprof trace nccl` standalone gives collect's torch_busbw row for row (one implementation)."""
    mine = _csv(["trace", "nccl", str(_trace(fixture, 0)), str(_trace(fixture, 1))])
    collected = _table(fixture)
    assert len(mine) == len(collected)
    for col in ("scope", "collective", "bucket", "count"):
        assert mine[col].astype(str).tolist() == collected[col].astype(str).tolist(), col
    for col in ("bytes", "median_ns", "algbw_gbps", "busbw_gbps"):
        assert mine[col].tolist() == pytest.approx(collected[col].astype(float).tolist(), nan_ok=True), col
    _agree(collected)


def test_nsys_nccl_busbw_is_collects_table_and_its_columns_agree(fixtures_dir: Path) -> None:
    """`hpcprof nsys nccl --busbw` (default window: collect's) gives collect's nsys_busbw; with
    `--window capture` it counts every NCCL kernel of the capture (the window's and the others)."""
    from hpcprof.tools.nsys.analysis.collect import NsysCollector

    paths = [fixtures_dir / "nsys" / "ddp_blobs" / f"rank{rank}.sqlite" for rank in (0, 1)]
    mine = _csv(["nsys", "nccl", "--busbw", *map(str, paths)])
    tool = NsysCollector()
    joined = pd.concat([tool.analyse_file(p, r)[nt.BUSBW.key] for r, p in enumerate(paths)], ignore_index=True)
    collected = tool.reduce(lambda name: joined if name == nt.BUSBW.key else None, [].append)[nt.BUSBW.key]
    assert mine[["scope", "collective", "bucket", "count"]].astype(str).values.tolist() == \
        collected[["scope", "collective", "bucket", "count"]].astype(str).values.tolist()
    assert mine["busbw_gbps"].tolist() == pytest.approx(collected["busbw_gbps"].tolist(), nan_ok=True)
    _agree(collected)
    _agree(mine)
    whole = _csv(["nsys", "nccl", "--busbw", "--window", "capture", *map(str, paths)])
    assert set(whole["window"]) == {"capture"}
    assert whole.loc[whole["scope"] == "rank", "count"].sum() >= mine.loc[mine["scope"] == "rank", "count"].sum()
    assert (whole["collective"] == "AllGather").any() and not (mine["collective"] == "AllGather").any()
