"""Differential tests of `hpcprof nsys stats` against the real `nsys stats` on generated exports.

The exports come from tests/differential/nsys_exports.py (seeded, derived from the real fixtures).
nsys 2022.4 (Debian non-free, installed by tests/services/nsys.sh when root) made the files of every
export with ties (the seeds below TIE_SEEDS are compared with the 2025.3.1 gold only) once, kept in
tests/fixtures/nsys/gold_generated_ties_2022.4.tar.xz and gold_generated_projection_2022.4.tar.xz
(benchmarks/gpu/nsys_gold.sh with NSYS set); it runs again here on every LIVE_EVERY-th of those
exports, and its files must equal the kept ones byte for byte, so the kept files stay what this
nsys writes (each of its 1,040 runs costs 0.15 s of CPU, most of the suite's single largest setup,
benchmarks/results/test_durations.txt). nsys 2025.3.1 exists only on the GPU machine, so its outputs
for the same seeds were made there (benchmarks/gpu/nsys_gold.sh) and are kept in
tests/fixtures/nsys/gold_generated_2025.3.1.tar.xz (seeds 0..519) and
gold_generated_ties_2025.3.1.tar.xz (seeds 1000..1519, made with exact ties in every ORDER BY: see
nsys_exports.TIE_SEEDS); the reports added later have their own tarballs per seed range (GOLD_2025),
and seeds 2000..2519 add NVTX ranges enclosing GPU launches (nsys_exports.PROJECTION_SEEDS) for the
NVTX projection reports.
Every report both tools know is compared byte for byte; a report nsys skips (no such data) or
fails on is an empty file on its side and MissingData (nothing written) on ours.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tarfile
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from difflib import unified_diff
from pathlib import Path

import pytest

from hpcprof.tools.nsys.stats.db import Export
from hpcprof.tools.nsys.stats.schema import MissingData
from hpcprof.tools.nsys.stats.stats import run_table
from hpcprof.tools.nsys.stats.table import write_csv

sys.path.insert(0, str(Path(__file__).parent / "differential"))
from nsys_exports import PROJECTION_SEEDS, TIE_SEEDS, _cut, derive, open_generated, rows_to_keep  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NSYS_2022 = Path("/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys")
OLD_REPORTS = ["gpukernsum", "cudaapisum", "gpumemtimesum", "gpumemsizesum", "gpusum", "nvtxsum", "nvtxppsum",
               "nvtxsesum", "osrtsum", "gputrace", "kernexecsum", "cudaapitrace", "kernexectrace",
               "apigpusum", "nvtxgpuproj", "nvtxkernsum"]
FIRST_2025 = ["cuda_gpu_kern_sum", "cuda_gpu_kern_gb_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum",
              "cuda_gpu_mem_size_sum", "cuda_gpu_sum", "nvtx_sum", "nvtx_pushpop_sum", "nvtx_startend_sum", "osrt_sum",
              "cuda_gpu_trace"]
API_2025 = ["cuda_api_gpu_sum", "cuda_kern_exec_sum", "cuda_kern_exec_trace", "cuda_api_trace", "nvtx_gpu_proj_sum",
            "nvtx_gpu_proj_trace", "nvtx_kern_sum"]
#: the current names compared here (the unified memory, OpenMP and MPI reports need the tables of
#: nsys_extra_exports.py: test_differential_nsys_extra.py)
NEW_REPORTS = FIRST_2025 + API_2025
# nsys 2025.3.1 gold per seed range: (tarball, the reports it holds), stored as .tar.xz, unpacked by fixture_files
GOLD_2025 = {"plain": [("gold_generated_2025.3.1.tar", FIRST_2025), ("gold_generated_api_2025.3.1.tar", API_2025)],
             "ties": [("gold_generated_ties_2025.3.1.tar", FIRST_2025),
                      ("gold_generated_ties_api_2025.3.1.tar", API_2025)],
             "projection": [("gold_generated_projection_2025.3.1.tar", FIRST_2025 + API_2025)]}
#: worker processes are spawned, not forked: the test process has threads (a forked child can inherit a held lock)
SPAWN = multiprocessing.get_context("spawn")
#: nsys 2022.4's kept files per seed range (tests/fixtures/nsys/), unpacked from .tar.xz by fixture_files
GOLD_2022 = {"ties": "gold_generated_ties_2022.4.tar", "projection": "gold_generated_projection_2022.4.tar"}
#: nsys 2022.4 runs here on the exports whose seed is a multiple of this
LIVE_EVERY = 8
PER_KIND = int(os.environ.get("HPCPROF_DIFF_EXPORTS", "520"))
SEEDS = [*range(PER_KIND), *range(TIE_SEEDS, TIE_SEEDS + PER_KIND), *range(PROJECTION_SEEDS, PROJECTION_SEEDS + PER_KIND)]


def kind_of(seed: int) -> str:
    """The seed range (GOLD_2025's key) of `seed`."""
    return "projection" if seed >= PROJECTION_SEEDS else "ties" if seed >= TIE_SEEDS else "plain"


@dataclass
class Outcome:
    """Counts and short diffs of one nsys version's comparison."""

    compared: int = 0
    identical: int = 0
    differing: list[str] = field(default_factory=list)

    def add(self, name: str, report: str, theirs: str, mine: str) -> None:
        self.compared += 1
        if theirs == mine:
            self.identical += 1
        else:
            diff = unified_diff(theirs.splitlines(True), mine.splitlines(True), "nsys", "hpcprof")
            self.differing.append(f"{name} {report}:\n" + "".join(list(diff)[:8]))


def ours(db: Path, reports: list[str]) -> dict[str, str]:
    """hpcprof's CSV text of each report ('' where it has no such data)."""
    out = {}
    with Export(db) as export:
        for report in reports:
            buf = io.StringIO()
            try:
                write_csv(run_table(export, report), buf)     # what the CLI writes (no DataFrame)
            except MissingData:
                pass
            out[report] = buf.getvalue()
    return out


def _derive(args: tuple[int, Path, Path]) -> Path:
    return derive(*args)


def _compare(args: tuple[Path, dict[str, str], dict[str, str]]) -> dict[str, Outcome]:
    """One export against nsys 2022.4: its files beside the export where it ran here, else its kept
    files (`kept`: report -> CSV text, '' where nsys skipped; the kept files are also compared with
    those it wrote here), and against the 2025.3.1 gold of the reports made for its seed (`gold`),
    every report."""
    db, gold, kept = args
    outcomes = {version: Outcome() for version in (*VERSIONS, KEPT)}
    live = Path(f"{db.with_suffix('')}_{OLD_REPORTS[0]}.csv").exists()
    reports = (OLD_REPORTS if live or kept else []) + NEW_REPORTS
    mine = ours(db, reports)
    for report in OLD_REPORTS if live or kept else []:
        theirs = Path(f"{db.with_suffix('')}_{report}.csv").read_text() if live else kept[report]
        outcomes["2022.4"].add(db.name, report, theirs, mine[report])
        if live and kept:
            outcomes[KEPT].add(db.name, report, theirs, kept[report])
    for report in (r for r in NEW_REPORTS if r in gold):
        outcomes["2025.3.1"].add(db.name, report, gold[report], mine[report])
    return outcomes


def gold_texts(tarball: Path) -> dict[str, str]:
    """The text of each file of a gold tarball by its file name, read from the tarball (not
    unpacked: tens of thousands of small files)."""
    with tarfile.open(tarball) as tar:
        return {Path(member.name).name: io.TextIOWrapper(tar.extractfile(member), encoding="utf-8").read()  # type: ignore[arg-type]
                for member in tar if member.isfile()}


VERSIONS = ("2022.4", "2025.3.1")
#: the outcome of nsys 2022.4's kept files against the files it wrote here
KEPT = "2022.4 kept"


def _nsys_2022() -> Path | str:
    """nsys 2022.4, installed by tests/services/nsys.sh when missing and root; else why not."""
    if not NSYS_2022.exists():
        if os.geteuid() != 0:
            return "nsys 2022.4 is not installed and installing it needs root: sudo bash tests/services/nsys.sh"
        subprocess.run(["bash", str(REPO / "tests" / "services" / "nsys.sh")], check=True,
                       capture_output=True, timeout=900)
    return NSYS_2022


@pytest.fixture(scope="module")
def comparisons(fixtures_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome | str]:
    """Both comparisons over the same generated exports (made and compared in 2 processes)."""
    work = tmp_path_factory.mktemp("differential")
    gold_reports: dict[str, list[str]] = {kind: [] for kind in GOLD_2025}
    gold: dict[str, str] = {}
    for kind, parts in GOLD_2025.items():         # each tarball once made on the GPU machine
        for name, reports in parts:
            stored = fixtures_dir / "nsys" / name
            if stored.exists():
                gold_reports[kind] += reports
                gold |= gold_texts(stored)
    kept = {kind: gold_texts(fixtures_dir / "nsys" / name) for kind, name in GOLD_2022.items()}
    nsys = _nsys_2022()
    totals = {version: Outcome() for version in (*VERSIONS, KEPT)}
    with ProcessPoolExecutor(max_workers=2, mp_context=SPAWN) as pool:
        exports = list(pool.map(_derive, [(seed, fixtures_dir, work) for seed in SEEDS], chunksize=16))
        if isinstance(nsys, Path):
            def reference(db: Path) -> None:         # nsys writes an empty file where it skips
                subprocess.run([str(nsys), "stats", "--report", ",".join(OLD_REPORTS), "--format", "csv",
                                "--force-overwrite", "true", "--output", str(db.with_suffix("")), str(db)],
                               capture_output=True, timeout=300, check=False)
            with ThreadPoolExecutor(max_workers=2) as threads:
                list(threads.map(reference, [db for seed, db in zip(SEEDS, exports, strict=True)
                                             if seed >= TIE_SEEDS and seed % LIVE_EVERY == 0]))
        jobs = [(db, {report: gold.get(f"{db.stem}_{report}.csv", "") for report in gold_reports[kind_of(seed)]},
                 {report: kept[kind_of(seed)][f"{db.stem}_{report}.csv"] for report in OLD_REPORTS}
                 if kind_of(seed) in kept else {})
                for seed, db in zip(SEEDS, exports, strict=True)]
        for outcomes in pool.map(_compare, jobs, chunksize=8):
            for key, part in outcomes.items():
                totals[key].compared += part.compared
                totals[key].identical += part.identical
                totals[key].differing += part.differing
    return {**totals, KEPT: totals[KEPT] if isinstance(nsys, Path) else nsys,
            "exports": f"{2 * PER_KIND} generated exports with exact ties ({PER_KIND} with NVTX ranges enclosing launches; "
                       f"nsys run here on every {LIVE_EVERY}th, its kept files for the others)",
            "exports 2025.3.1": f"{sum(bool(gold_reports[kind_of(s)]) for s in SEEDS)} generated exports"
                                + "".join(f" ({kind}: gold of {len(set(r))} reports)" for kind, r in gold_reports.items())}


@pytest.mark.slow               # nsys 2022.4, a long differential sweep
@pytest.mark.timeout(1800)     # the first one makes and compares every export (module fixture)
@pytest.mark.parametrize("version", VERSIONS)
def test_every_report_identical_to_nsys_on_generated_exports(comparisons: dict, version: str, record_counts) -> None:
    outcome = comparisons[version]
    source = "run here and kept" if version == "2022.4" else "gold made on the GPU machine"
    reports = OLD_REPORTS if version == "2022.4" else NEW_REPORTS
    exports = comparisons["exports" if version == "2022.4" else "exports 2025.3.1"]
    record_counts(f"nsys {version} ({source}): {outcome.compared} reports compared over "
                  f"{exports}, {outcome.identical} identical")
    assert outcome.compared >= 500 * len(reports) or PER_KIND < 500
    assert not outcome.differing, (f"{len(outcome.differing)} reports differ; first:\n"
                                   + "\n".join(outcome.differing[:5]))


@pytest.mark.slow               # nsys 2022.4, a long differential sweep
def test_nsys_2022_writes_its_kept_files(comparisons: dict, record_counts) -> None:
    """The files nsys 2022.4 writes here are its kept files, byte for byte: the kept files compared
    with ours above are still this nsys's output for these exports."""
    outcome = comparisons[KEPT]
    if isinstance(outcome, str):
        pytest.skip(outcome)
    record_counts(f"nsys 2022.4 run here on every {LIVE_EVERY}th export with ties: {outcome.compared} files "
                  f"against its kept ones, {outcome.identical} identical")
    assert outcome.compared >= 2 * PER_KIND // LIVE_EVERY * len(OLD_REPORTS)
    assert not outcome.differing, (f"{len(outcome.differing)} files differ from the kept ones (remake them: "
                                   "benchmarks/gpu/nsys_gold.sh with NSYS set); first:\n"
                                   + "\n".join(outcome.differing[:5]))


def _cut_row_by_row(con: sqlite3.Connection, table: str, rng: random.Random, at_least: int) -> None:
    """nsys_exports._cut as a plain reading of it: a sample of the list of rowids deleted one by one."""
    n = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    keep = rows_to_keep(n, rng, at_least)
    if keep < n:
        rowids = [r[0] for r in con.execute(f"SELECT rowid FROM {table} ORDER BY rowid")]
        con.executemany(f"DELETE FROM {table} WHERE rowid = ?", [(r,) for r in rng.sample(rowids, n - keep)])


def test_cut_keeps_the_rows_a_row_by_row_cut_keeps(tmp_path: Path) -> None:
    """The generators' cut (the table emptied at once, the kept rows put back) leaves the rows, rowids,
    values with their types, and index entries that deleting a sample of the rowids one by one leaves,
    and the random generator in the same state, for tables above and below MAX_ROWS."""
    base = tmp_path / "base.sqlite"
    with sqlite3.connect(base) as con:
        con.execute('CREATE TABLE T (start INTEGER NOT NULL, "end" INTEGER, text TEXT, value REAL, data BLOB)')
        con.execute("CREATE INDEX t_start ON T (start)")
        con.executemany("INSERT INTO T VALUES (?, ?, ?, ?, ?)",
                        [(i % 97, None if i % 5 else i + 3, f"r{i}" if i % 3 else None, i / 7, bytes([i % 256]))
                         for i in range(1500)])
    cases = 0
    for rows in (1500, 401, 400, 37, 1):
        for seed in range(40):
            kept = []
            for cut in (_cut, _cut_row_by_row):
                db = tmp_path / f"{cut.__name__}.sqlite"
                shutil.copyfile(base, db)
                rng = random.Random(seed)
                with closing(open_generated(db)) as con:
                    con.execute("DELETE FROM T WHERE rowid > ?", (rows,))
                    cut(con, "T", rng, seed % 3)
                    con.commit()
                    kept.append((con.execute("SELECT rowid, *, typeof(value), typeof(data) FROM T ORDER BY rowid").fetchall(),
                                 con.execute("SELECT start, rowid FROM T INDEXED BY t_start ORDER BY start").fetchall(),
                                 rng.random()))
            assert kept[0] == kept[1], (rows, seed)
            cases += len(kept[0][0]) < rows
    assert cases > 100                  # most cases cut something
