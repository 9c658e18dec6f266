"""Generated Nsight Compute CSV exports as Echo's kernel_metric/run.sh writes them, and Echo's own
ncu_report_process.py run on them (the differential test of `hpcprof ncu metrics --layout echo`).

A case is a folder `temp/output_details.csv` (`ncu -i R --page details --csv`) and
`temp/output_kshortname.csv` (`ncu -i R --print-kernel-base function --csv`: the details page with
function base names), plus `output/` for Echo's result. Written as ncu writes them: every field
quoted, metric rows cut after "Metric Value" with a trailing comma, rule rows whole; the header
of ncu 2022 ("Kernel Time", metrics "Compute (SM) [%]" / "Memory [%]", no "# SMs") or of
2024/2025 ("Block Size" … "Estimated Speedup"). Per seed it varies what Echo's script is sensitive
to: sections present or not, values printed as ncu prints them (2 decimals, "0", "100", thousands
separators, "n/a", empty, text), a Metric Value column that is all numbers (read as floats) or
all integers, repeated kernel IDs and repeated metric rows, kernels in or out of order, IDs missing
from or extra in the kshortname export, repeated names, names pandas reads as NA or numbers,
names with commas and quotes.

Echo's outputs on the cases of seeds 0..KEPT_CASES-1 are kept (tests/fixtures/ncu/KEPT, `python -m
tests.differential.ncu_exports --keep 200 OUT.json.xz`); the test runs the script again on every
LIVE_EVERY-th case, whose output must equal the kept one.

Echo's script is `ncu_report_process_echo.txt` beside this file: kernel_metric/ncu_report_process.py
of NetX-lab/Echo-slowdown at 7d698a77c0318f2b706ed27d3f6221f8b1e0a349, unmodified (sha256
`ECHO_SCRIPT_SHA256`; MIT License, Copyright (c) 2025 NetX: ncu_report_process_echo.LICENSE).
"""

from __future__ import annotations

import hashlib
import json
import lzma
import random
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ECHO_SCRIPT = Path(__file__).with_name("ncu_report_process_echo.txt")
ECHO_SCRIPT_SHA256 = "1e172b5c8e8b6187fb334b1b4f61cc0f2c1cf6f70034c212fb5f57cc1a685a23"
ECHO_COMMIT = "7d698a77c0318f2b706ed27d3f6221f8b1e0a349"
#: Echo's outputs on the cases of seeds 0..KEPT_CASES-1, kept (tests/fixtures/ncu/, unpacked by fixture_files);
#: the script runs again on every LIVE_EVERY-th case, whose output must equal the kept one
KEPT, KEPT_CASES, LIVE_EVERY = "generated_echo_ncu.json", 200, 8

HEADER_2022 = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time", "Context", "Stream",
               "Section Name", "Metric Name", "Metric Unit", "Metric Value", "Rule Name", "Rule Type",
               "Rule Description"]
HEADER_2025 = ["ID", "Process ID", "Process Name", "Host Name",
               "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg",
               "Id:Domain:Start/Stop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg", "Kernel Name", "Context",
               "Stream", "Block Size", "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit",
               "Metric Value", "Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type",
               "Estimated Speedup"]
SOL = "GPU Speed Of Light Throughput"
#: (section, rule-row section id, [(metric, unit, kind)]); kinds drive the printed values
SECTIONS: list[tuple[str, str, list[tuple[str, str, str]]]] = [
    (SOL, "SpeedOfLight", [
        ("DRAM Frequency", "Ghz", "small"), ("SM Frequency", "Ghz", "small"), ("Elapsed Cycles", "cycle", "count"),
        ("Memory Throughput", "%", "pct"), ("DRAM Throughput", "%", "pct"), ("Duration", "us", "small"),
        ("L1/TEX Cache Throughput", "%", "pct"), ("L2 Cache Throughput", "%", "pct"),
        ("SM Active Cycles", "cycle", "count"), ("Compute (SM) Throughput", "%", "pct")]),
    ("Memory Workload Analysis", "MemoryWorkloadAnalysis", [
        ("Memory Throughput", "Gbyte/s", "small"), ("Mem Busy", "%", "pct"), ("Max Bandwidth", "%", "pct"),
        ("L1/TEX Hit Rate", "%", "pct"), ("L2 Compression Success Rate", "%", "pct"),
        ("L2 Hit Rate", "%", "pct"), ("Mem Pipes Busy", "%", "pct")]),
    ("Launch Statistics", "LaunchStats", [
        ("Block Size", "", "int"), ("Function Cache Configuration", "", "text"), ("Grid Size", "", "count"),
        ("Registers Per Thread", "register/thread", "int"), ("# SMs", "SM", "sms"),
        ("Threads", "thread", "count"), ("Waves Per SM", "", "small")]),
    ("Occupancy", "Occupancy", [
        ("Block Limit SM", "block", "int"), ("Block Limit Registers", "block", "int"),
        ("Theoretical Active Warps per SM", "warp", "int"), ("Theoretical Occupancy", "%", "pct"),
        ("Achieved Occupancy", "%", "pct"), ("Achieved Active Warps Per SM", "warp", "small")]),
    ("Compute Workload Analysis", "ComputeWorkloadAnalysis", [
        ("Executed Ipc Active", "inst/cycle", "small"), ("SM Busy", "%", "pct")]),
]
OLD_NAMES = {"Compute (SM) Throughput": "Compute (SM) [%]", "Memory Throughput": "Memory [%]"}
NAMES = ["vectorized_elementwise_kernel", "ampere_sgemm_128x64_tn", "layer_norm_grad_input_kernel_vectorized",
         "reduce_kernel", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "GammaBetaBackwardCUDAKernel_32x32",
         "julia__5_6739", "elementwise_kernel", "softmax_warp_backward", "indexSelectLargeIndex"]
ODD_NAMES = ["NA", "null", "n/a", "kernel,with,comma", 'say "hi"', "12345", " padded ", "ümlaut_kernel"]
NA_TEXTS = ["", "n/a", "N/A", "nan", "NA"]


@dataclass(frozen=True)
class Case:
    """One generated pair of exports."""

    details: str
    kshortname: str
    mode: str        # "text": Metric Value read as text; "float": all numbers; "int": all integers


def _quoted(fields: list[str]) -> str:
    return ",".join('"' + f.replace('"', '""') + '"' for f in fields)


def _value(rng: random.Random, kind: str, mode: str, old: bool) -> str:
    """A value as ncu prints it; `mode` "float"/"int" keeps the whole column numeric."""
    if mode != "int" and rng.random() < 0.04:
        return rng.choice(NA_TEXTS)
    if mode == "text" and rng.random() < 0.03:
        return "no data"
    if mode == "int" or kind == "int":
        return str(rng.choice([0, 1, 2, 8, 32, 100, 255, rng.randrange(0, 2000)]))
    if kind == "sms":
        return rng.choice(["84", "108", "132", "152"])
    if kind == "text":
        return rng.choice(["CachePreferNone", "CachePreferShared", "PolicySpread"]) if mode == "text" else "0"
    if kind == "count":
        n = rng.randrange(0, 5_000_000)
        return f"{n:,}" if mode == "text" and not old else str(n)
    if kind == "pct":
        return rng.choice(["0", "100", "0.00", "62.50", "100.12", f"{rng.uniform(0, 100):.2f}",
                           f"{rng.uniform(0, 100):.2f}"])
    return f"{rng.uniform(0, 50):.2f}"


def make_case(seed: int) -> Case:
    """Details and kshortname exports of one seed."""
    rng = random.Random(seed)
    old = rng.random() < 0.35
    header = HEADER_2022 if old else HEADER_2025
    mode = rng.choices(["text", "float", "int"], [0.6, 0.25, 0.15])[0]
    rules = mode != "int" and rng.random() < 0.7
    sections = [s for s in SECTIONS if rng.random() < 0.85] or SECTIONS[:1]
    n = rng.randint(1, 14)
    ids = sorted(rng.sample(range(3 * n), n)) if rng.random() < 0.3 else list(range(n))
    odd = rng.random() < 0.3
    pool = NAMES + (ODD_NAMES if odd else [])
    if rng.random() < 0.05:
        pool = ["12345", "678", "90"]  # every name a number: read_csv makes the column integers
    name = {kid: rng.choice(pool) for kid in ids}

    def prefix(kid: int, kernel: str) -> list[str]:
        if old:
            return [str(kid), "69163", "julia", "127.0.0.1", kernel, "2022-Dec-02 15:45:59", "1", "13"]
        return [str(kid), "1942", "python3.12", "127.0.0.1", '1942  "<default domain>:backward" ', "", kernel,
                "1", "7", "(384, 1, 1)", "(2, 66, 1)", "0", "9.0"]

    def block(kid: int) -> list[tuple[list[str], list[str]]]:
        """(metric-row fields, kernel-independent tail) of one kernel: its rows before the name."""
        rows = []
        for section, section_id, metrics in sections:
            if rng.random() < 0.05:
                continue  # a kernel without this section
            for metric, unit, kind in metrics:
                if rng.random() < 0.04:
                    continue
                shown = OLD_NAMES.get(metric, metric) if old and section == SOL else metric
                if old and metric == "# SMs":
                    continue
                if mode == "text" and unit == "Ghz" and old:
                    unit = "cycle/nsecond"
                for _ in range(2 if rng.random() < 0.03 else 1):  # a metric row repeated with another value
                    rows.append(([section, shown, unit, _value(rng, kind, mode, old)], []))
            if rules:
                speedup = [] if old else ["global", "12.5"]
                rows.append(([section_id, "", "", ""], ["SOLBottleneck", rng.choice(["WRN", "INF", "OPT"]),
                                                        'Rule text, with commas and "quotes".', *speedup]))
        return rows

    blocks = [(kid, block(kid)) for kid in ids]
    if rng.random() < 0.25:  # a kernel ID again later in the file, other values (Echo takes the first)
        kid = rng.choice(ids)
        blocks.append((kid, block(kid)))
    if rng.random() < 0.2:
        rng.shuffle(blocks)

    def page(names: dict[int, str], order: list[tuple[int, list]]) -> str:
        lines = [_quoted(header)]
        for kid, rows in order:
            for fields, tail in rows:
                head = _quoted(prefix(kid, names[kid]) + fields)
                lines.append(head + ("," + _quoted(tail) if tail else ","))
        return "\n".join(lines) + "\n"

    details = page(name, blocks)
    short_blocks = [(kid, rows) for kid, rows in blocks]
    short_name = dict(name)
    if rng.random() < 0.2:  # kernels the kshortname export lacks
        drop = set(rng.sample(ids, rng.randint(1, max(1, n // 3))))
        short_blocks = [b for b in short_blocks if b[0] not in drop]
    if rng.random() < 0.15:  # kernels only the kshortname export has
        extra = max(ids) + 1 + rng.randrange(3)
        short_name[extra] = rng.choice(pool)
        short_blocks.append((extra, blocks[0][1]))
    if rng.random() < 0.2:  # an ID again under another name (Echo keeps the first)
        kid = rng.choice(ids)
        again = dict(short_name)
        again[kid] = rng.choice(pool)
        return Case(details, page(short_name, short_blocks) + page(again, [(kid, blocks[0][1])]).split("\n", 1)[1],
                    mode)
    if rng.random() < 0.2:
        rng.shuffle(short_blocks)
    return Case(details, page(short_name, short_blocks), mode)


def write_case(folder: Path, case: Case) -> tuple[Path, Path]:
    """Echo's layout in `folder` (temp/output_*.csv, output/); returns (details, kshortname)."""
    (folder / "temp").mkdir(parents=True, exist_ok=True)
    (folder / "output").mkdir(exist_ok=True)
    details, names = folder / "temp/output_details.csv", folder / "temp/output_kshortname.csv"
    details.write_text(case.details, encoding="utf-8")
    names.write_text(case.kshortname, encoding="utf-8")
    return details, names


def script_sha256() -> str:
    return hashlib.sha256(ECHO_SCRIPT.read_bytes()).hexdigest()


_DRIVER = """
import os, runpy, sys
import pandas
print(pandas.__version__)
for folder in sys.argv[2:]:
    os.chdir(folder)
    try:
        runpy.run_path(sys.argv[1], run_name="__main__")
    except Exception as exc:
        with open("echo_error.txt", "w") as fh:
            fh.write(f"{type(exc).__name__}: {exc}")
"""


def run_echo(folders: list[Path], python: str = sys.executable) -> tuple[dict[Path, bytes | str], str]:
    """Echo's script (unmodified) in each case folder, in one `python` process (any pandas, e.g. Echo's
    2.2.0): per folder the bytes of output/kernel_metric_output.csv, or the error Echo's script raised;
    and the version of the pandas it ran under."""
    proc = subprocess.run([python, "-c", _DRIVER, str(ECHO_SCRIPT), *map(str, folders)], check=True,
                          capture_output=True, text=True, timeout=900)
    results: dict[Path, bytes | str] = {}
    for folder in folders:
        error = folder / "echo_error.txt"
        results[folder] = error.read_text() if error.exists() else (folder / "output/kernel_metric_output.csv").read_bytes()
    return results, proc.stdout.splitlines()[0]


def case_sha256(case: Case) -> str:
    """The sha256 of a case's two exports (what a kept output was made from)."""
    return hashlib.sha256(f"{case.details}\0{case.kshortname}".encode()).hexdigest()


def kept_output(record: dict[str, str]) -> bytes | str:
    """A kept case's output as run_echo gives it: the CSV's bytes, or the error Echo's script raised."""
    return record["error"] if "error" in record else record["csv"].encode("utf-8")


def keep(count: int, out: Path, python: str = sys.executable) -> None:
    """Echo's outputs on the cases of seeds 0..count-1 under `python` as JSON, xz-compressed (KEPT's stored
    form): the script's sha256, the pandas it ran under and, per seed, the case's sha256 and Echo's CSV
    text or the error it raised."""
    with tempfile.TemporaryDirectory(prefix="echo-keep-") as tmp:
        cases = {Path(tmp) / f"seed{seed}": (seed, make_case(seed)) for seed in range(count)}
        for folder, (_, case) in cases.items():
            write_case(folder, case)
        echo, version = run_echo(list(cases), python)
    kept = {}
    for folder, (seed, case) in cases.items():
        result = echo[folder]
        kept[str(seed)] = {"input": case_sha256(case),
                           **({"error": result} if isinstance(result, str) else {"csv": result.decode("utf-8")})}
        assert kept_output(kept[str(seed)]) == result
    with lzma.open(out, "wt", encoding="utf-8") as fh:
        json.dump({"script": script_sha256(), "pandas": version, "cases": kept}, fh, sort_keys=True)


if __name__ == "__main__":
    if sys.argv[1:2] != ["--keep"] or len(sys.argv) != 4:
        sys.exit("usage: python -m tests.differential.ncu_exports --keep N OUT.json.xz")
    keep(int(sys.argv[2]), Path(sys.argv[3]))
