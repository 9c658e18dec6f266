"""Differential tests of `hpcprof nsys stats` against the real `nsys stats` on generated exports.

The exports come from tests/differential/nsys_exports.py (seeded, derived from the real fixtures).
nsys 2022.4 (Debian non-free, installed by tests/services/nsys.sh when root) runs here on every
export; nsys 2025.3.1 exists only on the GPU machine, so its outputs for the same seeds were made
there (benchmarks/gpu/nsys_gold.sh) and are kept in tests/fixtures/nsys/gold_generated_2025.3.1.tar.xz.
Every report both tools know is compared byte for byte; a report nsys skips (no such data) or
fails on is an empty file on its side and MissingData (nothing written) on ours.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from difflib import unified_diff
from pathlib import Path

import pytest

from hpcprof.analysis.nsys.stats import REPORTS, Export, MissingData, run_report, write_csv

sys.path.insert(0, str(Path(__file__).parent / "differential"))
from nsys_exports import derive  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NSYS_2022 = Path("/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys")
OLD_REPORTS = ["gpukernsum", "cudaapisum", "gpumemtimesum", "gpumemsizesum", "gpusum", "nvtxsum", "nvtxppsum",
               "nvtxsesum", "osrtsum", "gputrace", "kernexecsum"]
NEW_REPORTS = sorted(name for name in REPORTS if "_" in name)
GOLD_2025 = "gold_generated_2025.3.1.tar"   # stored as .tar.xz, unpacked by fixture_files
SEEDS = range(int(os.environ.get("HPCPROF_DIFF_EXPORTS", "520")))


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
                write_csv(run_report(export, report), buf)
            except MissingData:
                pass
            out[report] = buf.getvalue()
    return out


def _derive(args: tuple[int, Path, Path]) -> Path:
    return derive(*args)


def _compare(args: tuple[Path, Path]) -> tuple[Outcome, Outcome]:
    """One export against nsys 2022.4's files beside it (if it ran) and the 2025.3.1 gold."""
    db, gold_dir = args
    old, new = Outcome(), Outcome()
    with_2022 = Path(f"{db.with_suffix('')}_{OLD_REPORTS[0]}.csv").exists()
    mine = ours(db, (OLD_REPORTS if with_2022 else []) + NEW_REPORTS)
    if with_2022:
        for report in OLD_REPORTS:
            old.add(db.name, report, Path(f"{db.with_suffix('')}_{report}.csv").read_text(), mine[report])
    for report in NEW_REPORTS:
        gold = gold_dir / f"{db.stem}_{report}.csv"
        new.add(db.name, report, gold.read_text() if gold.exists() else "", mine[report])
    return old, new


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
    gold_dir = work / "gold_2025"
    with tarfile.open(fixtures_dir / "nsys" / GOLD_2025) as tar:
        tar.extractall(gold_dir, filter="data")
    with ProcessPoolExecutor(max_workers=2) as pool:
        exports = list(pool.map(_derive, [(seed, fixtures_dir, work) for seed in SEEDS], chunksize=16))
    nsys = _nsys_2022()
    if isinstance(nsys, Path):
        def reference(db: Path) -> None:         # nsys writes an empty file where it skips
            subprocess.run([str(nsys), "stats", "--report", ",".join(OLD_REPORTS), "--format", "csv",
                            "--force-overwrite", "true", "--output", str(db.with_suffix("")), str(db)],
                           capture_output=True, timeout=300, check=False)
        with ThreadPoolExecutor(max_workers=2) as threads:
            list(threads.map(reference, exports))
    old, new = Outcome(), Outcome()
    with ProcessPoolExecutor(max_workers=2) as pool:
        for o, n in pool.map(_compare, [(db, gold_dir) for db in exports], chunksize=8):
            for total, part in ((old, o), (new, n)):
                total.compared += part.compared
                total.identical += part.identical
                total.differing += part.differing
    return {"2022.4": old if isinstance(nsys, Path) else nsys, "2025.3.1": new, "exports": str(len(exports))}


@pytest.mark.parametrize("version", ["2022.4", "2025.3.1"])
def test_every_report_identical_to_nsys_on_generated_exports(comparisons: dict, version: str,
                                                             record_counts) -> None:
    outcome = comparisons[version]
    if isinstance(outcome, str):
        pytest.skip(outcome)
    source = "run here" if version == "2022.4" else "gold made on the GPU machine"
    record_counts(f"nsys {version} ({source}): {outcome.compared} reports compared over "
                  f"{comparisons['exports']} generated exports, {outcome.identical} identical")
    assert outcome.compared >= 500 * len(OLD_REPORTS if version == "2022.4" else NEW_REPORTS) or len(SEEDS) < 500
    assert not outcome.differing, (f"{len(outcome.differing)} reports differ; first:\n"
                                   + "\n".join(outcome.differing[:5]))
