"""Differential tests of the unified memory, OpenMP and MPI reports of `hpcprof nsys stats`
against the real `nsys stats`, on exports from tests/differential/nsys_extra_exports.py (seeds
3000.., the generated exports of nsys_exports.py plus UM page fault and migration, OpenMP and
MPI tables with exact ties in every ORDER BY, empty and missing tables, zero durations).

nsys 2022.4's files of every export (umcpupagefaults, unifiedmemory, unifiedmemorytotals,
openmpevtsum: one nsys process per export) are kept in tests/fixtures/nsys/gold_extra_2022.4.tar.xz
(benchmarks/gpu/nsys_gold.sh with NSYS set); it runs here again on every LIVE_EVERY-th export, whose
files must equal the kept ones byte for byte. nsys 2025.3.1's outputs (um_cpu_page_faults_sum,
um_sum, um_total_sum, openmp_sum, mpi_event_sum, mpi_event_trace) were made on the GPU machine by
benchmarks/gpu/nsys_gold.sh with NSYS_GOLD_GENERATOR=nsys_extra_exports.py and are kept in
tests/fixtures/nsys/gold_extra_2025.3.1.tar.xz. Byte for byte; a report nsys skips is an empty
file on its side and MissingData on ours.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import pytest
from test_differential_nsys import KEPT, LIVE_EVERY, SPAWN, Outcome, _nsys_2022, gold_texts, ours

sys.path.insert(0, str(Path(__file__).parent / "differential"))
from nsys_extra_exports import FIRST_SEED, derive_extra  # noqa: E402

OLD = ["umcpupagefaults", "unifiedmemory", "unifiedmemorytotals", "openmpevtsum"]
NEW = ["um_cpu_page_faults_sum", "um_sum", "um_total_sum", "openmp_sum", "mpi_event_sum", "mpi_event_trace"]
GOLD_2025 = "gold_extra_2025.3.1.tar"       # stored as .tar.xz, unpacked by fixtures_dir
KEPT_2022 = "gold_extra_2022.4.tar"        # nsys 2022.4's files, kept the same way
PER_KIND = int(os.environ.get("HPCPROF_DIFF_EXPORTS", "520"))
SEEDS = range(FIRST_SEED, FIRST_SEED + PER_KIND)


def _derive(args: tuple[int, Path, Path]) -> Path:
    return derive_extra(*args)


def _compare(args: tuple[Path, bool, dict[str, str], dict[str, str] | None]) -> dict[str, Outcome]:
    """One export against nsys 2022.4: its files beside the export where it ran here (`live`), else
    its kept files (`kept`: report -> CSV text, '' where nsys skipped; compared with those it wrote
    here too), and against the 2025.3.1 gold (if made)."""
    db, live, kept, gold = args
    mine = ours(db, OLD + (NEW if gold is not None else []))
    out = {"2022.4": Outcome(), KEPT: Outcome(), "2025.3.1": Outcome()}
    for report in OLD:
        written = Path(f"{db.with_suffix('')}_{report}.csv")
        theirs = (written.read_text() if written.exists() else "") if live else kept[report]
        out["2022.4"].add(db.name, report, theirs, mine[report])
        if live:
            out[KEPT].add(db.name, report, theirs, kept[report])
    for report in NEW if gold is not None else []:
        out["2025.3.1"].add(db.name, report, gold[report], mine[report])
    return out


@pytest.fixture(scope="module")
def comparisons(fixtures_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome | str]:
    """Both comparisons over the same generated exports (made and compared in 2 processes)."""
    work = tmp_path_factory.mktemp("differential_extra")
    stored = fixtures_dir / "nsys" / GOLD_2025
    gold = gold_texts(stored) if stored.exists() else None
    kept = gold_texts(fixtures_dir / "nsys" / KEPT_2022)
    nsys = _nsys_2022()
    totals = {"2022.4": Outcome(), KEPT: Outcome(), "2025.3.1": Outcome()}
    with ProcessPoolExecutor(max_workers=2, mp_context=SPAWN) as pool:
        exports = list(pool.map(_derive, [(seed, fixtures_dir, work) for seed in SEEDS], chunksize=16))
        live = set(exports[::LIVE_EVERY]) if isinstance(nsys, Path) else set()
        if isinstance(nsys, Path):
            def reference(db: Path) -> None:         # one nsys per export, every report (an empty file where it skips)
                subprocess.run([str(nsys), "stats", "--report", ",".join(OLD), "--format", "csv",
                                "--force-overwrite", "true", "--output", str(db.with_suffix("")), str(db)],
                               capture_output=True, timeout=300, check=False)
            with ThreadPoolExecutor(max_workers=2) as threads:
                list(threads.map(reference, live))
        jobs = [(db, db in live, {report: kept.get(f"{db.stem}_{report}.csv", "") for report in OLD},
                 None if gold is None else {report: gold.get(f"{db.stem}_{report}.csv", "") for report in NEW})
                for db in exports]
        for outcomes in pool.map(_compare, jobs, chunksize=16):
            for key, part in outcomes.items():
                totals[key].compared += part.compared
                totals[key].identical += part.identical
                totals[key].differing += part.differing
    why_not_2025 = (f"no nsys 2025.3.1 gold yet (tests/fixtures/nsys/{GOLD_2025}.xz): make it on the GPU machine "
                    "with NSYS_GOLD_GENERATOR=nsys_extra_exports.py benchmarks/gpu/nsys_gold.sh --seeds 3000 520")
    return {"2022.4": totals["2022.4"], KEPT: totals[KEPT] if isinstance(nsys, Path) else nsys,
            "2025.3.1": totals["2025.3.1"] if gold is not None else why_not_2025}


@pytest.mark.slow               # nsys 2022.4, a long differential sweep
@pytest.mark.timeout(1800)     # the first one makes and compares every export (module fixture)
@pytest.mark.parametrize("version", ["2022.4", KEPT, "2025.3.1"])
def test_um_openmp_mpi_reports_identical_to_nsys(comparisons: dict, version: str, record_counts) -> None:
    """Ours against nsys 2022.4's files (run here and kept) and 2025.3.1's gold; and nsys 2022.4's
    files written here against its kept ones (`2022.4 kept`)."""
    outcome = comparisons[version]
    if isinstance(outcome, str):
        if version == KEPT and os.environ.get("CI"):
            pytest.fail(f"nsys 2022.4 is required in CI: {outcome}")
        pytest.skip(outcome)
    reports = NEW if version == "2025.3.1" else OLD
    source = {"2022.4": "run here and kept", KEPT: f"run here on every {LIVE_EVERY}th export, against its kept files",
              "2025.3.1": "gold made on the GPU machine"}[version]
    record_counts(f"nsys {version} ({source}), UM/OpenMP/MPI reports ({', '.join(reports)}): {outcome.compared} "
                  f"reports compared over {PER_KIND} generated exports, {outcome.identical} identical")
    assert outcome.compared == (len(range(0, PER_KIND, LIVE_EVERY)) if version == KEPT else PER_KIND) * len(reports)
    assert not outcome.differing, (f"{len(outcome.differing)} reports differ; first:\n"
                                   + "\n".join(outcome.differing[:5]))


def test_every_known_report_has_a_differential_test() -> None:
    """Each report name hpcprof knows is compared with nsys by a differential test (this one or
    test_differential_nsys.py), so a report added to the registry cannot go unchecked."""
    from test_differential_nsys import NEW_REPORTS, OLD_REPORTS

    from hpcprof.tools.nsys.stats.stats import REPORTS

    assert set(REPORTS) == {*OLD_REPORTS, *NEW_REPORTS, *OLD, *NEW}
