"""Differential run: generated exports through the real `nsys stats` and through hpcprof.

`python -m tests.differential.nsys_diff N` (from the repository root) prints
`compared`/`identical` counts and the first differences. Used by tests/test_nsys_stats.py.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .nsys_gen import fixtures_tree, generate

#: every report hpcprof knows under the names nsys 2022.4 knows
OLD_REPORTS = ["cudaapisum", "gpukernsum", "gpumemsizesum", "gpumemtimesum", "gpusum", "kernexecsum",
               "nvtxppsum", "nvtxsesum", "nvtxsum", "osrtsum", "gputrace"]
NSYS_2022 = "/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys"


def find_nsys() -> str | None:
    """The nsys 2022.4 binary of Debian's nsight-systems-target, else `nsys` on PATH."""
    return NSYS_2022 if os.access(NSYS_2022, os.X_OK) else shutil.which("nsys")


def nsys_reports(nsys: str, db: Path, reports: list[str]) -> dict[str, str | None]:
    """report -> CSV text that `nsys stats` writes ("" where it skips the report or the report
    has no rows; None where nsys fails: 2022.4's gputrace needs TARGET_INFO_GPU)."""
    prefix = db.with_suffix("")
    proc = subprocess.run([nsys, "stats", "-q", "--force-export=false", "--report", ",".join(reports),
                           "--format", "csv", "--output", str(prefix), str(db)],
                          check=False, capture_output=True, text=True, timeout=120)
    out: dict[str, str | None] = {}
    for report in reports:
        path = Path(f"{prefix}_{report}.csv")
        failed = f"Report '{report}.py' encountered an internal error" in proc.stdout + proc.stderr
        out[report] = None if failed else path.read_text() if path.exists() else ""
    return out


def hpcprof_reports(db: Path, reports: list[str]) -> dict[str, str]:
    """report -> CSV text of hpcprof ("" for reports with missing data)."""
    from hpcprof.analysis.nsys.db import Export
    from hpcprof.analysis.nsys.stats import MissingData, run_report, write_csv

    out = {}
    with Export(db) as export:
        for report in reports:
            try:
                df = run_report(export, report)
            except MissingData:
                out[report] = ""
                continue
            buf = io.StringIO()
            write_csv(df, buf)
            out[report] = buf.getvalue()
    return out


def compare(fixtures: Path, seeds: range, nsys: str, reports: list[str] = OLD_REPORTS,
            workers: int = 2) -> tuple[int, int, list[str]]:
    """(compared, identical, differences) over the exports of `seeds`; reports nsys fails on
    are not compared."""
    with tempfile.TemporaryDirectory(prefix="nsys-diff-") as tmp:
        def one(seed: int) -> list[tuple[str, bool]]:
            db = generate(fixtures, seed, Path(tmp) / f"gen{seed}.sqlite")
            theirs = nsys_reports(nsys, db, reports)
            ours = hpcprof_reports(db, reports)
            for path in [db, *Path(tmp).glob(f"gen{seed}_*.csv")]:
                path.unlink()
            return [(f"seed {seed} {r}: {_first_diff(theirs[r] or '', ours[r])}", theirs[r] == ours[r])
                    for r in reports if theirs[r] is not None]
        with ThreadPoolExecutor(workers) as pool:
            results = [item for part in pool.map(one, seeds) for item in part]
    diffs = [what for what, same in results if not same]
    return len(results), len(results) - len(diffs), diffs


NEW_REPORTS = ["cuda_api_sum", "cuda_gpu_kern_gb_sum", "cuda_gpu_kern_sum", "cuda_gpu_mem_size_sum",
               "cuda_gpu_mem_time_sum", "cuda_gpu_sum", "cuda_gpu_trace", "nvtx_pushpop_sum",
               "nvtx_startend_sum", "nvtx_sum", "osrt_sum"]


def compare_gold(fixtures: Path, gold: Path, workers: int = 2) -> tuple[int, int, int, list[str]]:
    """(exports, compared, identical, differences) of hpcprof against the nsys 2025.3.1 gold
    tarball of benchmarks/gpu/nsys_gold_generated.sh (gen<seed>_<report>.csv; a report nsys
    skipped is an empty or absent file; exports where nsys reported an error are left out)."""
    import re
    import tarfile

    with tarfile.open(gold) as tar:
        files = {Path(m.name).name: tar.extractfile(m).read().decode()  # type: ignore[union-attr]
                 for m in tar.getmembers() if m.isfile()}
    seeds = sorted({int(m.group(1)) for name in files if (m := re.match(r"gen(\d+)_", name))})
    seeds = [s for s in seeds if f"gen{s}.err" not in files]
    with tempfile.TemporaryDirectory(prefix="nsys-gold-") as tmp:
        def one(seed: int) -> list[str]:
            db = generate(fixtures, seed, Path(tmp) / f"gen{seed}.sqlite")
            ours = hpcprof_reports(db, NEW_REPORTS)
            db.unlink()
            return [f"seed {seed} {r}: {_first_diff(files.get(f'gen{seed}_{r}.csv', ''), ours[r])}"
                    for r in NEW_REPORTS if files.get(f"gen{seed}_{r}.csv", "") != ours[r]]
        with ThreadPoolExecutor(workers) as pool:
            diffs = [d for part in pool.map(one, seeds) for d in part]
    compared = len(seeds) * len(NEW_REPORTS)
    return len(seeds), compared, compared - len(diffs), diffs


def _first_diff(a: str, b: str) -> str:
    for i, (x, y) in enumerate(zip(a.splitlines(), b.splitlines())):
        if x != y:
            return f"line {i + 1}: nsys {x!r} hpcprof {y!r}"
    return f"line counts {len(a.splitlines())} vs {len(b.splitlines())}"


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    start = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    fixtures = fixtures_tree()
    nsys = find_nsys()
    if nsys is None:
        sys.exit("nsys not found: run tests/services/nsys.sh as root")
    compared, identical, diffs = compare(fixtures, range(start, start + n), nsys)
    print(f"nsys stats differential: {n} exports, {compared} reports compared, {identical} identical")
    for d in diffs[:40]:
        print(d)


if __name__ == "__main__":
    main()
