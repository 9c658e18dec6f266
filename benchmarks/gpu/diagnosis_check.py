"""diagnosis_campaign.sh's reports checked in headless Chromium (the tests' own probes: tests/test_report_html.py,
tests/test_report_findings.py): per report, console messages, figures declared and drawn with marks,
every plot area's size at 1,400 px, the page's width against the window; and a screenshot of the first
screen (1,400 x 1,000) to OUT/<name>_first_screen.png.
Usage: python3 benchmarks/gpu/diagnosis_check.py OUT REPORT.html..."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from test_report_findings import drawn_layout  # noqa: E402
from test_report_html import CHROMIUM_FLAGS, chromium, drawn_figures, load_in_chromium  # noqa: E402


def main(out: Path, pages: list[Path]) -> int:
    failed = 0
    for page in pages:
        with tempfile.TemporaryDirectory() as tmp:
            dom, console = load_in_chromium(page, Path(tmp) / "full.png")
            declared, drawn = drawn_figures(dom)
            layout = drawn_layout(page, Path(tmp), 1400)
        areas = [a for f in layout["figs"] for a in f["areas"]]
        empty = [f["caption_text"] for f in layout["figs"] if not f["areas"] or any(
            a["right"] - a["left"] < 50 or a["bottom"] - a["top"] < 100 for a in f["areas"])]
        ok = not console and drawn == declared and not empty and layout["page"] <= layout["view"]
        failed += not ok
        print(f"{page.name}: {declared} figures, {drawn} drawn with marks, {len(areas)} plot areas, "
              f"{len(empty)} empty or collapsed, page {layout['page']} px in a {layout['view']} px window, "
              f"{len(console)} console messages: {'ok' if ok else 'FAILED'}")
        with tempfile.TemporaryDirectory(prefix="hpcprof-chromium-") as profile:
            subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--window-size=1400,1000",
                            f"--screenshot={out / (page.stem + '_first_screen.png')}", page.as_uri()],
                           capture_output=True, timeout=120, check=False)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), [Path(p).resolve() for p in sys.argv[2:]]))
