"""nsys 2022.4's `nsys analyze` files for the generated rules exports (nsys_rules_exports.py): the
six 2022.4 rules under each option set of SETS_2022, one nsys per export, as
`<stem>_<rule>[_<args>].csv` (an empty file where nsys skips or finds nothing).
tests/test_nsys_rules.py runs `run_nsys` on some exports and keeps the files of all of them in
tests/fixtures/nsys/rules_gold_2022.4.tar.xz, made from the repository root by

    python tests/differential/nsys_rules_2022.py NSYS FIRST COUNT OUT.tar.xz
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from nsys_rules_exports import SETS_2022, derive_rules, option_sets, rule_spec  # noqa: E402

from hpcprof.tools.nsys.stats import rules  # noqa: E402


def run_nsys(nsys: Path, db: Path) -> None:
    """Every 2022.4 rule with every option set; nsys writes <db>_<rule>[_<args>].csv (empty when skipped)."""
    sets = option_sets(db)
    specs = [rule_spec(rule, sets[name]) for name in SETS_2022 for rule in rules.RULES_2022]
    subprocess.run([str(nsys), "analyze", "--format", "csv", "--force-overwrite", "true", "-o",
                    str(db.with_suffix("")), "-r", ",".join(specs), str(db)],
                   capture_output=True, timeout=300, check=True)


def main(argv: list[str]) -> None:
    nsys, first, count, out = Path(argv[0]), int(argv[1]), int(argv[2]), Path(argv[3])
    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    with tempfile.TemporaryDirectory() as work:
        exports = [derive_rules(seed, fixtures, Path(work)) for seed in range(first, first + count)]
        with ThreadPoolExecutor(max_workers=2) as threads:
            list(threads.map(lambda db: run_nsys(nsys, db), exports))
        with tarfile.open(out, "w:xz") as tar:
            for csv in sorted(Path(work).glob("*.csv")):
                tar.add(csv, arcname=csv.name)


if __name__ == "__main__":
    main(sys.argv[1:])
