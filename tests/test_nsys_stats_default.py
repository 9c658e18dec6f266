"""`hpcprof nsys stats` without -r runs nsys 2022.4's default report set (the same reports, order
and output file names as nsys, byte-identical files, the same reports skipped for the same missing
data), and its quick lane (`hpcprof.__main__` runs CSV command lines without click,
stats_command.quick_args) is the click command: the same bytes, messages, files and exit status,
with none of click, numpy or pandas imported."""

from __future__ import annotations

import ast
import platform
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from hpcprof.analysis.nsys.stats_command import quick_args
from hpcprof.analysis.nsys_stats.stats import DEFAULT_REPORTS, NOT_COMPUTED, REPORTS

sys.path.insert(0, str(Path(__file__).parent / "differential"))
from nsys_extra_exports import FIRST_SEED, derive_extra  # noqa: E402
from test_differential_nsys import _nsys_2022  # noqa: E402

SIX = "gpukernsum,cudaapisum,gpumemtimesum,gpumemsizesum,nvtxsum,osrtsum"
#: the command line through hpcprof.__main__ (the quick lane first) and through click alone
QUICK = [sys.executable, "-m", "hpcprof", "nsys", "stats"]
CLICK = [sys.executable, "-c", "import sys; from hpcprof.cli import main; main(sys.argv[1:])", "nsys", "stats"]


def _nsys() -> Path:
    found = _nsys_2022()
    if isinstance(found, str):
        pytest.skip(found)
    return found


@pytest.fixture(scope="module")
def exports(fixtures_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Fixture exports (kernels, CUDA API, NVTX, memory, OS runtime) and generated ones with unified
    memory and OpenMP tables."""
    nsys = fixtures_dir / "nsys"
    work = tmp_path_factory.mktemp("extra")
    return [nsys / "h200_seqpar_bf16" / "rank0.sqlite", nsys / "h200_campaign" / "ddp_ws2_rank1.sqlite",
            nsys / "nsysai_mock.sqlite", fixtures_dir / "gpu" / "run3" / "nsys" / "ddp_gpt2_p2_rank0.sqlite",
            *(derive_extra(seed, fixtures_dir, work) for seed in range(FIRST_SEED, FIRST_SEED + 3))]


@pytest.mark.slow   # nsys 2022.4
def test_the_default_set_is_nsys_2022s_own() -> None:
    """The list `nsys stats --help` prints (2022.4), in its order; every name computed or skipped."""
    help_text = subprocess.run([str(_nsys()), "stats", "--help"], capture_output=True, text=True, check=True).stdout
    listed = help_text.split("default report set:")[1].split("See --help")[0].split()
    assert tuple(listed) == DEFAULT_REPORTS
    assert all(name in REPORTS or name in NOT_COMPUTED for name in DEFAULT_REPORTS)


@pytest.mark.slow   # nsys 2022.4
def test_the_default_set_writes_the_files_nsys_writes(exports: list[Path], tmp_path: Path) -> None:
    """`-o PREFIX --format csv` without -r: the same file names, byte for byte the same files (a
    skipped report's file empty, as nsys writes it), the same reports skipped for the same data."""
    nsys = _nsys()
    for export in exports:
        theirs, mine = tmp_path / f"{export.stem}-nsys", tmp_path / f"{export.stem}-hpcprof"
        theirs.mkdir()
        mine.mkdir()
        run = subprocess.run([str(nsys), "stats", "--format", "csv", "-o", str(theirs / "p"), str(export)],
                             capture_output=True, text=True, check=True)
        ours = subprocess.run([*QUICK, "--format", "csv", "-o", str(mine / "p"), str(export)],
                              capture_output=True, text=True)
        assert ours.returncode == 0, ours.stderr
        names = sorted(p.name for p in theirs.iterdir())
        assert names == sorted(f"p_{name}.csv" for name in DEFAULT_REPORTS)
        assert sorted(p.name for p in mine.iterdir()) == names, export
        for name in names:
            assert (mine / name).read_bytes() == (theirs / name).read_bytes(), (export, name)
        skipped_nsys = dict(re.findall(r"reports/(\w+)\.py\] to \[.*?\]\.\.\. SKIPPED: .*? does not contain (.*?)\.?$",
                                       run.stdout, re.M))
        skipped_ours = dict(re.findall(r": (\w+) skipped: no (.*)$", ours.stderr, re.M))
        assert skipped_ours == skipped_nsys, export
        assert len(skipped_ours) >= 9               # the graphics, Windows and OpenACC reports at least


def test_the_default_set_on_stdout_is_the_same_tables(exports: list[Path]) -> None:
    """Without -o: each report under its `# FILE REPORT` line, in nsys's order, the same CSV as -r names."""
    export = exports[0]
    default = subprocess.run([*QUICK, "--format", "csv", str(export)], capture_output=True, text=True, check=True)
    named = subprocess.run([*QUICK, "-r", ",".join(DEFAULT_REPORTS), "--format", "csv", str(export)],
                           capture_output=True, text=True, check=True)
    assert default.stdout == named.stdout and default.stderr == named.stderr
    headers = re.findall(r"^# \S+ (\w+)$", default.stdout, re.M)
    assert headers == [n for n in DEFAULT_REPORTS if f" {n} skipped:" not in default.stderr]
    assert headers[:2] == ["nvtxsum", "osrtsum"]


def test_a_report_hpcprof_does_not_compute_is_said_where_the_export_has_its_data(exports: list[Path],
                                                                                 tmp_path: Path) -> None:
    """An export with KHR_DEBUG_EVENTS: khrdebugsum is not skipped (nsys computes it) nor made up:
    one line saying so, and exit 2."""
    export = tmp_path / "khr.sqlite"
    export.write_bytes(exports[0].read_bytes())
    with sqlite3.connect(export) as con:
        con.execute("CREATE TABLE KHR_DEBUG_EVENTS (eventClass INTEGER, start INTEGER, end INTEGER, textId INTEGER)")
    for command in (QUICK, CLICK):
        res = subprocess.run([*command, "--format", "csv", str(export)], capture_output=True, text=True)
        assert res.returncode == 2
        assert "khrdebugsum: the export has KHR Extension (KHR_DEBUG) data, which hpcprof does not report" in res.stderr
        assert "Traceback" not in res.stderr and "Time (%)" in res.stdout


def _both(args: list[str], cwd: Path) -> list[tuple[int, str, str, dict[str, bytes]]]:
    """(exit status, stdout, stderr, files written) of `args` through the quick lane and through click,
    each in a fresh folder under `cwd`."""
    out = []
    for label, command in (("quick", QUICK), ("click", CLICK)):
        here = cwd / label
        here.mkdir()
        res = subprocess.run([*command, *args], capture_output=True, text=True, cwd=here)
        out.append((res.returncode, res.stdout, res.stderr.replace(str(here), "HERE"),
                    {p.name: p.read_bytes() for p in sorted(here.iterdir())}))
    return out


@pytest.mark.parametrize("case", ["default", "six", "two-files-prefix", "damaged", "missing", "python", "not-small"])
def test_the_quick_lane_is_the_click_command(exports: list[Path], tmp_path: Path, case: str) -> None:
    truncated = tmp_path / "truncated.sqlite"
    truncated.write_bytes(exports[0].read_bytes()[:50_000])
    one, two = str(exports[0]), str(exports[1])
    args = {"default": ["--format", "csv", one],
            "six": ["-r", SIX, "--format", "csv", two],
            "two-files-prefix": [one, "--format=csv", "--report=gpukernsum,osrtsum", two, "-o", "out"],
            "damaged": [str(truncated), one, "--format", "csv", "-r", "cuda_gpu_kern_sum"],
            "missing": [str(tmp_path / "nowhere.sqlite"), "--format", "csv"],
            "python": ["--engine", "python", "-r", "nvtx_sum", "--format", "csv", one],
            "not-small": ["--engine", "columnar", "-r", "cuda_gpu_trace", "--format", "csv", two]}[case]
    assert quick_args(args) is not None                 # the quick lane runs it (the test is not vacuous)
    quick, click = _both(args, tmp_path)
    assert quick == click
    assert quick[0] == (2 if case in ("damaged", "missing") else 0)


@pytest.mark.parametrize("args", [["--help"], ["x.sqlite"], ["x.sqlite", "--format", "table"],
                                  ["x.sqlite", "--format", "csv", "-r", "nosuchreport"],
                                  ["x.sqlite", "--format", "csv", "-rgpukernsum"],
                                  ["x.sqlite", "--format", "csv", "-r", "nvtxsum", "-r", "osrtsum"],
                                  ["./x.sqlite", "--format", "csv"], ["x.sqlite", "--format", "csv", "--", "y"],
                                  ["x.sqlite", "--format", "csv", "--engine", "python"],
                                  ["x.sqlite", "--format", "csv", "--engine", "python", "-r", "gputrace"],
                                  ["x.sqlite", "--format", "csv", "-o"], ["--format", "csv"]])
def test_the_quick_lane_leaves_every_other_command_line_to_click(args: list[str]) -> None:
    assert quick_args(args) is None


def test_the_quick_lane_imports_neither_click_nor_numpy(exports: list[Path]) -> None:
    probe = ("import sys; from hpcprof.__main__ import main\n"
             "try:\n    main()\nfinally:\n"
             "    print('HEAVY', sorted(m for m in ('click', 'numpy', 'pandas', 'pyarrow', 'sqlalchemy', 'rich', 're', "
             "'typing', 'pathlib', 'dataclasses', 'fractions') if m in sys.modules), file=sys.stderr)")
    res = subprocess.run([sys.executable, "-c", probe, "nsys", "stats", "--format", "csv", str(exports[0])],
                         capture_output=True, text=True)
    assert res.returncode == 0 and "HEAVY []" in res.stderr and "Time (%)" in res.stdout


FAULTS = """
import resource, sys
from hpcprof.analysis.nsys.stats_command import HEAP_BLOCK_BYTES, KEPT_FREE_BYTES
from hpcprof.cpus import keep_freed_memory
said = keep_freed_memory(HEAP_BLOCK_BYTES, KEPT_FREE_BYTES) if sys.argv[1] == "retain" else None
faults = []
for _ in range(2):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = bytearray(24 << 20)         # zeroed: every page written
    del block
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(said, *faults)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc (mallopt)")
def test_a_large_exports_reads_reuse_the_memory_they_free() -> None:
    """What nsys stats has malloc keep on the columnar path of a large export (HEAP_BLOCK_BYTES,
    KEPT_FREE_BYTES, cpus.keep_freed_memory): a second 24 MiB block takes the pages the first freed
    (no new page faults), where by default it is mapped and faulted in anew."""
    def faults(mode: str) -> list[str]:
        return subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True, text=True,
                              check=True).stdout.split()

    said, first, second = faults("retain")
    assert said == "True"
    assert int(first) > 1000 and int(second) < int(first) // 10
    _, first, second = faults("default")
    assert int(second) > int(first) // 2


def test_no_gather_into_an_array_goes_through_a_buffer() -> None:
    """`np.take(..., out=...)` in its default mode ("raise") copies `out` into a buffer and writes it
    back: a fresh array's pages are first mapped to the zero page, then write-faulted again, each
    with a TLB flush of the other CPUs (memcpy/UM-heavy's default set: 10 % of its samples, 0.65 ->
    0.60 s). Every such gather in hpcprof names an unbuffered mode (its indices are in range)."""
    root = Path(__file__).resolve().parents[1] / "hpcprof"
    gathers, buffered = 0, []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "take"):
                continue
            keywords = {k.arg: k.value for k in node.keywords}
            if "out" in keywords:
                gathers += 1
                mode = keywords.get("mode")
                if not (isinstance(mode, ast.Constant) and mode.value in ("clip", "wrap")):
                    buffered.append(f"{path.relative_to(root)}:{node.lineno}")
    assert gathers >= 3 and buffered == []
