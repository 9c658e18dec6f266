"""`hpcprof bench ceilings` under 2 real ranks (gloo on CPU), the `ceilings:` experiment option in the
job script and a real local job, collect's bench_ceilings and the report's % of attainable."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hpcprof_cli import hpcprof

from hpcprof.core.catalog import BENCH_CEILINGS, CEILINGS_COLUMNS
from hpcprof.report.ceilings import attainable
from hpcprof.report.peaks import known_peaks
from hpcprof.workloads.ceiling_specs import (
    BUS_FACTORS,
    CollectiveSpec,
    GemmSpec,
    bus_factor,
    default_specs,
    parse_bytes,
    parse_collective,
    parse_gemm,
)

BIN = Path(sys.executable).parent
GEMMS = ["32,16,24:float32", "16,16,16:bfloat16", "24,8,16:tf32"]
COLLECTIVES = ["all_gather:64K", "reduce_scatter:16K:bfloat16", "all_reduce:4096:float16"]


def clean_env() -> dict[str, str]:
    """The test's environment without launcher/hpcprof variables, one thread per rank."""
    import os

    drop = ("HPCPROF_", "PMI_", "PMIX_", "OMPI_", "SLURM_", "PALS_", "MPI_LOCAL")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return {**env, "OMP_NUM_THREADS": "1"}


def bench(launcher: list[str], args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    cmd = [*launcher, sys.executable, "-m", "hpcprof", "bench", "ceilings", *args]
    return subprocess.run(cmd, cwd=cwd, env={**clean_env(), **env}, capture_output=True, text=True, timeout=180)


def nccl_tests_factor(op: str, n: int) -> float:
    """nccl-tests doc/PERFORMANCE.md, Summary: AllReduce 2*(n-1)/n, ReduceScatter and AllGather (n-1)/n."""
    return {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n, "all_gather": (n - 1) / n}[op]


def check_consistent(result: dict, world_size: int) -> None:
    """Every row: the columns of the catalog, busbw = algbw x nccl-tests' factor, algbw = bytes / time,
    TFLOP/s = 2mnk / time."""
    import torch

    assert result["schema"] == "hpcprof.ceilings/1" and result["world_size"] == world_size
    assert [r["rank"] for r in result["ranks"]] == list(range(world_size))
    for row in result["rows"]:
        assert set(CEILINGS_COLUMNS) <= set(row), set(CEILINGS_COLUMNS) - set(row)
        assert row["world_size"] == world_size and row["backend"] == "gloo" and row["torch"] == torch.__version__
        assert row["time_s"] > 0
        if row["kind"] == "gemm":
            flops = 2 * row["m"] * row["n"] * row["k"]
            assert row["flops"] == flops
            assert row["tflops"] == pytest.approx(flops / row["time_s"] / 1e12, rel=1e-12)
            assert row["tflops_min_rank"] <= row["tflops"] <= row["tflops_max_rank"]
        else:
            assert row["algbw_GBps"] == pytest.approx(row["bytes"] / row["time_s"] / 1e9, rel=1e-12)
            factor = nccl_tests_factor(row["op"], world_size)
            assert row["bus_factor"] == pytest.approx(factor)
            assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * factor, rel=1e-12)
            # on the CPU (gloo) the calls run through torch.distributed only, launched one by one; the row is
            # the fastest of the ways its `ways` lists
            assert list(row["ways"]) == ["torch.distributed, calls launched one by one"]
            assert row["busbw_GBps"] == pytest.approx(max(row["ways"].values()), rel=1e-12)
            assert "(torch.distributed, calls launched one by one)" in row["statistic"]


@pytest.mark.slow
def test_two_ranks_under_mpiexec(tmp_path: Path) -> None:
    args = [x for g in GEMMS for x in ("--gemm", g)] + [x for c in COLLECTIVES for x in ("--collective", c)]
    proc = bench([str(BIN / "mpiexec"), "-n", "2"], [*args, "--iters", "4", "--warmup", "1"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "ceilings.json").read_text())
    check_consistent(result, 2)
    rows = result["rows"]
    assert [(r["kind"], r["op"], r["dtype"]) for r in rows] == [
        ("gemm", "matmul", "float32"), ("gemm", "matmul", "bfloat16"), ("gemm", "matmul", "tf32"),
        ("collective", "all_gather", "float32"), ("collective", "reduce_scatter", "bfloat16"),
        ("collective", "all_reduce", "float16")]
    assert [r["bytes"] for r in rows[3:]] == [64 * 1024, 16 * 1024, 4096]
    assert [(r["m"], r["n"], r["k"]) for r in rows[:3]] == [(32, 16, 24), (16, 16, 16), (24, 8, 16)]
    assert result["versions"]["launcher"] == "mpi" and "results: " in proc.stdout


@pytest.mark.slow
def test_two_ranks_under_torchrun_sizes_from_an_experiment(tmp_path: Path) -> None:
    """--sizes-from an experiment: seqpar's two matmuls and its all-gather/reduce-scatter of S*H elements."""
    exp = tmp_path / "exp.yaml"
    exp.write_text("name: t\nworkload:\n  kind: seqpar\n  args: {sequence_length: 32, hidden_dim: 16, "
                   "precision: bfloat16}\nresources: {nodes: 1, ranks_per_node: 2}\n")
    out = tmp_path / "sub" / "c.json"
    proc = bench([str(BIN / "torchrun"), "--nproc-per-node", "2", "--no-python"],
                 ["--sizes-from", str(exp), "--iters", "3", "--warmup", "1", "--out", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    check_consistent(result, 2)
    assert result["versions"]["launcher"] == "torchrun"
    assert [(r["m"], r["n"], r["k"]) for r in result["rows"] if r["kind"] == "gemm"] == [(32, 8, 16), (32, 16, 8)]
    assert [(r["op"], r["bytes"]) for r in result["rows"] if r["kind"] == "collective"] == [
        ("all_gather", 32 * 16 * 2), ("reduce_scatter", 32 * 16 * 2)]


@pytest.mark.parametrize("n", [2, 3, 4, 8, 64])
def test_bus_factors_are_nccl_tests(n: int) -> None:
    for op in BUS_FACTORS:
        assert bus_factor(op, n) == pytest.approx(nccl_tests_factor(op, n))


def test_specs_parse_and_print_back() -> None:
    assert parse_bytes("1M") == 1 << 20 and parse_bytes("64MiB") == 64 << 20 and parse_bytes("2g") == 2 << 30
    assert parse_gemm("8,4,2") == GemmSpec(8, 4, 2, "bfloat16")
    assert parse_collective("all-gather:1K:float16") == CollectiveSpec("all_gather", 1024, "float16")
    for spec in (GemmSpec(3, 5, 7, "tf32"), CollectiveSpec("all_reduce", 4096, "bfloat16")):
        parse = parse_gemm if isinstance(spec, GemmSpec) else parse_collective
        assert parse(spec.text()) == spec
    gemms, collectives = default_specs("ddp", {}, 4)
    assert {g.dtype for g in gemms} == {"bfloat16", "tf32"} and all(g.m == g.n == g.k == 8192 for g in gemms)
    assert sorted({c.nbytes for c in collectives}) == [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]


@pytest.mark.parametrize(("args", "flag"), [
    (["--gemm", "1,2"], "--gemm"),
    (["--gemm", "8,8,8:int8"], "--gemm"),
    (["--collective", "broadcast:1M"], "--collective"),
    (["--collective", "all_gather:12X"], "--collective"),
    (["--sizes-from", "/nonexistent"], "--sizes-from"),
    (["--iters", "0"], "--iters"),
    (["--warmup", "x"], "--warmup"),
])
def test_bad_flags_are_one_line_exit_2(tmp_path: Path, args: list[str], flag: str) -> None:
    proc = hpcprof("bench", "ceilings", "--device", "cpu", *args, cwd=tmp_path)
    assert proc.returncode == 2 and flag in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "ceilings.json").exists()


@pytest.mark.slow
def test_size_not_split_over_the_ranks_exits_2_on_every_rank(tmp_path: Path) -> None:
    proc = bench([str(BIN / "mpiexec"), "-n", "2"], ["--collective", "all_gather:6:float32"], tmp_path,
                 PYTHONPROFILEIMPORTTIME="1")
    assert proc.returncode == 2
    assert proc.stderr.count("--collective all_gather:6:float32: 6 bytes do not split") == 2, proc.stderr
    # refused before torch loads: the ranks' import profiles (-X importtime) name hpcprof's modules, not torch
    assert re.search(r"\| +hpcprof\.workloads\.ranks$", proc.stderr, re.M), proc.stderr
    assert not re.search(r"\| +torch$", proc.stderr, re.M), proc.stderr


SEQPAR = ("name: t\nworkload:\n  kind: seqpar\n  args: {sequence_length: 16, hidden_dim: 8, iterations: 6, "
          "warmup_iterations: 1, precision: bfloat16}\nresources: {nodes: 1, ranks_per_node: 2}\n")


@pytest.mark.parametrize(("site", "launcher"), [("local", "mpiexec -n 2"), ("slurm-local", "srun -N 1 -n 2"),
                                                ("pbs-local", "mpiexec -n 2"), ("polaris", "mpiexec -n 2")])
def test_option_renders_the_line(tmp_path: Path, site: str, launcher: str) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(SEQPAR + "ceilings: true\nprofile: {tool: nsys}\n")
    hpcprof("render", str(exp), "--site", site, "--set", "resources.account=A", "-o", "out", cwd=tmp_path,
            check=True)
    job = (tmp_path / "out" / "job.sh").read_text()
    [line] = [x for x in job.splitlines() if "bench ceilings" in x and not x.startswith("#")]
    assert launcher in line and '"$RUN_DIR/rank_wrapper.sh" --hpcprof-unprofiled ' in line
    assert line.endswith("-m hpcprof bench ceilings --iters 20 --warmup 5 --gemm 16,4,8:bfloat16 --gemm "
                         "16,8,4:bfloat16 --collective all_gather:256:bfloat16 --collective reduce_scatter:256:bfloat16")
    assert job.index("bench ceilings") > job.index("rank_wrapper.sh\" ")    # after the workload's launch
    wrapper = (tmp_path / "out" / "rank_wrapper.sh").read_text()
    assert 'if [ "$hp_profiled" = 1 ] && ' in wrapper        # the ceilings' ranks are not profiled
    plain = tmp_path / "plain.yaml"
    plain.write_text(SEQPAR)
    hpcprof("render", str(plain), "--site", site, "--set", "resources.account=A", "-o", "plain", cwd=tmp_path,
            check=True)
    assert "ceilings" not in (tmp_path / "plain" / "job.sh").read_text()
    assert "hp_profiled" not in (tmp_path / "plain" / "rank_wrapper.sh").read_text()


@pytest.mark.parametrize("value", ['{gemm: ["8,8,8; touch /tmp/x"]}', '{collective: ["all_gather:1M\\n#SBATCH -N 9"]}',
                                   '{collective: ["all_gather:6:float32"]}', '"yes"', '{iters: 0}'])
def test_option_text_never_reaches_the_script(tmp_path: Path, value: str) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(SEQPAR + f"ceilings: {value}\n")
    proc = hpcprof("render", str(exp), "--site", "slurm-local", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 2 and "ceilings" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "job.sh").exists()


def test_option_sizes_are_rewritten_from_numbers(tmp_path: Path) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(SEQPAR + 'ceilings: {gemm: [" 64, 32,16 "], collective: ["all-reduce:1K:float16"], iters: 3}\n')
    hpcprof("render", str(exp), "--site", "local", "-o", "out", cwd=tmp_path, check=True)
    job = (tmp_path / "out" / "job.sh").read_text()
    assert "bench ceilings --iters 3 --warmup 5 --gemm 64,32,16:bfloat16 --collective all_reduce:1024:float16\n" in job


@pytest.mark.slow
def test_real_local_job_then_collect_and_report(tmp_path: Path) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(SEQPAR + "ceilings: {iters: 3, warmup: 1}\n")
    hpcprof("submit", str(exp), "--site", "local", "--wait", cwd=tmp_path, check=True)
    [run] = [p.parent for p in (tmp_path / "hpcprof-runs").glob("*/*/config.json")]
    status = dict(line.split("=", 1) for line in (run / "status").read_text().splitlines())
    assert status["exit_code"] == "0" and status["ceilings_exit_code"] == "0"
    hpcprof("collect", cwd=tmp_path, check=True)
    from hpcprof.run.results import read_table

    table = read_table(run, BENCH_CEILINGS.name)
    assert list(table.columns) == list(CEILINGS_COLUMNS)
    assert table[["kind", "op"]].values.tolist() == [["gemm", "matmul"], ["gemm", "matmul"],
                                                     ["collective", "all_gather"], ["collective", "reduce_scatter"]]
    collectives = table[table["kind"] == "collective"]
    assert (collectives["bytes"] == 16 * 8 * 2).all() and (table["world_size"] == 2).all()
    assert collectives["busbw_GBps"].tolist() == pytest.approx((collectives["algbw_GBps"] * 0.5).tolist())
    report = hpcprof("report", cwd=tmp_path, check=True).stdout
    assert "% of attainable" in report and "hpcprof bench ceilings in the same job" in report
    assert "16x4x8 bfloat16" in report and "256 B bfloat16" in report
    hpcprof("report", "--html", "r.html", cwd=tmp_path, check=True)
    page = (tmp_path / "r.html").read_text()
    assert "% of attainable: against hpcprof bench ceilings" in page and "phase.allgather.busbw" in page


def test_attainable_known_answer() -> None:
    """Numbers of a real 2xH200 run: seqpar's all-gather at 233.8 GB/s on a 2xH200 whose all-gather reaches 238
    at that size (51.96 % of NVLink's 450 per direction, 98.2 % of attainable); the bf16 matmul at 814
    of cuBLAS's 820 at its shape."""
    def row(**kw: object) -> dict[str, object]:
        return {**{k: None for k in CEILINGS_COLUMNS}, "created": "2026-11-20T10:00:00+00:00",
                "device_name": "NVIDIA H200", **kw}

    ceilings = pd.DataFrame([
        row(kind="collective", op="all_gather", dtype="bfloat16", bytes=64 << 20, busbw_GBps=238.0,
            statistic="calls back to back (NCCL's API, one CUDA graph of the calls) / calls, mean over ranks "
                      "(nccl-tests), best of 5 runs"),
        row(kind="collective", op="all_gather", dtype="bfloat16", bytes=1 << 20, busbw_GBps=60.0),
        row(kind="collective", op="all_gather", dtype="float32", bytes=96 << 20, busbw_GBps=300.0),
        row(kind="gemm", op="matmul", dtype="bfloat16", m=8192, n=4096, k=8192, tflops=820.0),
        row(kind="gemm", op="matmul", dtype="bfloat16", m=512, n=512, k=512, tflops=200.0),
        row(kind="gemm", op="matmul", dtype="float16", m=8192, n=4096, k=8192, tflops=900.0),
    ], columns=list(CEILINGS_COLUMNS))
    metrics = {"phase.allgather.busbw": 233.8, "phase.matmul1.tflops": 814.0, "phase.allgather.time": 1.0,
               "iteration.mean": 3.0}
    sizes = {"allgather": CollectiveSpec("all_gather", 72 << 20, "bfloat16"),
             "matmul1": GemmSpec(8192, 4096, 8192, "bfloat16")}
    rows = attainable(metrics, ceilings, precision="bfloat16", sizes=sizes, peaks=known_peaks("NVIDIA H200"),
                      nodes=1, world_size=2).set_index("figure")
    assert sorted(rows.index) == ["phase.allgather.busbw", "phase.matmul1.tflops"]
    ag, mm = rows.loc["phase.allgather.busbw"], rows.loc["phase.matmul1.tflops"]
    assert ag["pct_of_datasheet"] == pytest.approx(100 * 233.8 / 450) and round(ag["pct_of_datasheet"], 2) == 51.96
    assert ag["ceiling"] == 238.0 and ag["pct_of_ceiling"] == pytest.approx(100 * 233.8 / 238)
    assert ag["nearest_size"] == "64 MiB bfloat16" and "NVLink" in ag["datasheet_source"]
    assert ag["ceiling_way"] == "NCCL's API, one CUDA graph of the calls" and mm["ceiling_way"] == ""
    assert ag["ceiling_source"] == "hpcprof bench ceilings in the same job, 2026-11-20, NVIDIA H200"
    assert mm["ceiling"] == 820.0 and mm["pct_of_ceiling"] == pytest.approx(100 * 814 / 820)
    assert mm["pct_of_datasheet"] == pytest.approx(100 * 814 / 989.5)
    # without the phase's size: the best measured of that op and dtype; one rank: no bus bandwidth figure
    best = attainable(metrics, ceilings, precision="bfloat16").set_index("figure")
    assert best.loc["phase.allgather.busbw", "ceiling"] == 238.0 and pd.isna(best.loc["phase.allgather.busbw",
                                                                                     "pct_of_datasheet"])
    assert list(attainable(metrics, ceilings, precision="bfloat16", world_size=1)["figure"]) == ["phase.matmul1.tflops"]


def test_a_collectives_bus_bandwidth_against_the_ceiling_nearest_in_size() -> None:
    """The bus bandwidth table's % of attainable: the same collective's ceiling nearest in size (here 16 MiB
    for a 27 MiB all-reduce, 256 MiB for 168 MiB), none for a collective the ceilings did not measure."""
    import pandas as pd

    from hpcprof.report.ceilings import collective_attainable

    ceilings = pd.DataFrame({"kind": "collective", "op": ["all_reduce", "all_reduce", "all_gather"],
                             "dtype": "float32", "bytes": [16 * 2**20, 256 * 2**20, 16 * 2**20],
                             "busbw_GBps": [200.0, 300.0, 150.0]})
    rows = pd.DataFrame({"collective": ["AllReduce", "AllReduce", "Broadcast"],
                         "bytes": [27 * 2**20, 168 * 2**20, 2**20], "busbw_gbps": [100.0, 150.0, 10.0]})
    assert collective_attainable(rows, ceilings) == ["50.0 % (16 MiB)", "50.0 % (256 MiB)", ""]


def test_the_nccl_library_is_found_where_the_process_mapped_it(tmp_path: Path) -> None:
    """hpcprof.workloads.nccl_api.loaded_library reads /proc/self/maps' path column (torch's pip wheels map
    nvidia/nccl/lib/libnccl.so.2); none where no libnccl is mapped or the file cannot be read."""
    from hpcprof.workloads.nccl_api import loaded_library

    lib = "/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f10 r--p 00000000 08:01 42    /venv/lib/libtorch_cuda.so\n"
                    "7f20-7f30 rw-p 00000000 00:00 0 \n"
                    f"7f40-7f50 r-xp 00001000 08:01 43    {lib}\n")
    assert loaded_library(maps=maps) == Path(lib)
    assert loaded_library("libtorch_cuda", maps=maps) == Path("/venv/lib/libtorch_cuda.so")
    maps.write_text("7f00-7f10 r--p 00000000 08:01 42    /venv/lib/libtorch_cuda.so\n7f20-7f30 rw-p 00000000 00:00 0\n")
    assert loaded_library(maps=maps) is None
    assert loaded_library(maps=tmp_path / "absent") is None
