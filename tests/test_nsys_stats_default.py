"""`hpcprof nsys stats` without -r runs nsys 2022.4's default report set (the same reports, order
and output file names as nsys, byte-identical files, the same reports skipped for the same missing
data); its files go through the output checks every command's -o goes through; and it starts
without the heavy libraries where it computes nothing."""

from __future__ import annotations

import ast
import os
import platform
import re
import resource
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from hpcprof.tools.nsys.stats.stats import DEFAULT_REPORTS, NOT_COMPUTED, REPORTS

sys.path.insert(0, str(Path(__file__).parent / "differential"))
from nsys_extra_exports import FIRST_SEED, derive_extra  # noqa: E402
from test_differential_nsys import _nsys_2022  # noqa: E402

SIX = "gpukernsum,cudaapisum,gpumemtimesum,gpumemsizesum,nvtxsum,osrtsum"
#: the command line as the console script runs it
STATS = [sys.executable, "-m", "hpcprof", "nsys", "stats"]


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
        ours = subprocess.run([*STATS, "--format", "csv", "-o", str(mine / "p"), str(export)],
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
    default = subprocess.run([*STATS, "--format", "csv", str(export)], capture_output=True, text=True, check=True)
    named = subprocess.run([*STATS, "-r", ",".join(DEFAULT_REPORTS), "--format", "csv", str(export)],
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
    res = subprocess.run([*STATS, "--format", "csv", str(export)], capture_output=True, text=True)
    assert res.returncode == 2
    assert "khrdebugsum: the export has KHR Extension (KHR_DEBUG) data, which hpcprof does not report" in res.stderr
    assert "Traceback" not in res.stderr and "Time (%)" in res.stdout


@pytest.mark.parametrize(("case", "code"), [("two-files-prefix", 0), ("damaged", 2), ("missing", 2)])
def test_each_file_is_reported_on_its_own(exports: list[Path], tmp_path: Path, case: str, code: int) -> None:
    """Several files: each one's reports to PREFIX_<file>_<report>.csv; a damaged or missing file is
    one line naming it, the others still done, and exit 2."""
    truncated = tmp_path / "truncated.sqlite"
    truncated.write_bytes(exports[0].read_bytes()[:50_000])
    one, two = str(exports[0]), str(exports[1])
    args = {"two-files-prefix": [one, "--format=csv", "--report=gpukernsum,osrtsum", two, "-o", "out"],
            "damaged": [str(truncated), one, "--format", "csv", "-r", "cuda_gpu_kern_sum"],
            "missing": [str(tmp_path / "nowhere.sqlite"), one, "--format", "csv", "-r", "cuda_gpu_kern_sum"]}[case]
    res = subprocess.run([*STATS, *args], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == code and "Traceback" not in res.stderr
    if case == "two-files-prefix":
        assert sorted(p.name for p in tmp_path.glob("out_*")) == sorted(
            f"out_{Path(f).stem}_{r}.csv" for f in (one, two) for r in ("gpukernsum", "osrtsum"))
        return
    said = [line for line in res.stderr.splitlines() if line.startswith("hpcprof nsys: ")]
    assert len(said) == 1 and ("truncated.sqlite" in said[0] or "nowhere.sqlite" in said[0])
    assert "1 of 2 input file(s) could not be processed" in res.stderr
    assert res.stdout.count("Time (%)") == 1               # the other file's report


def test_a_symbolic_link_as_an_output_is_refused(exports: list[Path], tmp_path: Path) -> None:
    """-o PREFIX whose report file is a symbolic link: refused as every command's -o refuses it (one
    line, exit 2), the file it points to untouched."""
    target = tmp_path / "elsewhere.csv"
    target.write_text("mine\n")
    (tmp_path / "out_nvtxsum.csv").symlink_to(target)
    res = subprocess.run([*STATS, "-r", "nvtxsum", "--format", "csv", "-o", str(tmp_path / "out"), str(exports[0])],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [
        f"Error: -o {tmp_path / 'out_nvtxsum.csv'}: a symbolic link (to {target}); hpcprof does not write through "
        "links; nothing was written: give the path it points to, or leave -o out to write to stdout"]
    assert target.read_text() == "mine\n"


def _file_size_limit(limit: int) -> None:
    """In the child: files larger than `limit` bytes cannot be written (EFBIG, as a full disk's ENOSPC)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.skipif(not hasattr(resource, "RLIMIT_FSIZE"), reason="a file-size limit (RLIMIT_FSIZE)")
def test_an_output_that_cannot_be_written_is_one_line_and_nothing_half_written(exports: list[Path],
                                                                               tmp_path: Path) -> None:
    """A report file the disk will not take (here a file-size limit below its size): one line naming
    it, exit 2, and neither the file nor a temporary left behind."""
    res = subprocess.run([*STATS, "-r", "cuda_gpu_trace", "--format", "csv", "-o", str(tmp_path / "out"),
                          str(exports[0])], capture_output=True, text=True,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, preexec_fn=lambda: _file_size_limit(1024))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [
        f"Error: {tmp_path / 'out_cuda_gpu_trace.csv'}: cannot write (File too large); nothing was written there"]
    assert list(tmp_path.iterdir()) == []


def test_the_command_imports_no_heavy_library_until_it_reads_an_export(tmp_path: Path) -> None:
    """Start-up is click and the standard library: `nsys stats --help` and `nsys nccl --help` import
    none of numpy, pandas, pyarrow, SQLAlchemy or rich."""
    probe = ("import sys\nfrom hpcprof.cli import main\ntry:\n    main(sys.argv[1:])\nfinally:\n"
             "    print('HEAVY', sorted(m for m in ('numpy', 'pandas', 'pyarrow', 'sqlalchemy', 'rich') "
             "if m in sys.modules), file=sys.stderr)")
    for command in ("stats", "nccl", "overlap", "gaps"):
        res = subprocess.run([sys.executable, "-c", probe, "nsys", command, "--help"], capture_output=True, text=True,
                             cwd=tmp_path)
        assert res.returncode == 0 and "HEAVY []" in res.stderr and "Usage:" in res.stdout, res.stderr


FAULTS = """
import resource, sys
from hpcprof.tools.nsys.analysis.stats_command import HEAP_BLOCK_BYTES, KEPT_FREE_BYTES
from hpcprof.core.cpus import keep_freed_memory
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
