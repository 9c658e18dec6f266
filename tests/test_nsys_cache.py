"""The columnar cache of an nsys export's reads (hpcprof/tools/nsys/stats/cache.py): a second analysis
reads the cache and gives the same tables; a changed export empties it; a damaged file is read again."""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from hpcprof.tools.nsys.analysis.collect import analyse_file
from hpcprof.tools.nsys.stats import arrow, cache, stats
from hpcprof.tools.nsys.stats.cache import cache_dir
from hpcprof.tools.nsys.stats.db import Export
from hpcprof.tools.nsys.stats.schema import MissingData
from hpcprof.tools.nsys.stats.stats import REPORTS, SUMMARY_REPORTS, run_report, run_table
from hpcprof.tools.nsys.stats.table import write_csv

SEQPAR = Path("nsys") / "h200_seqpar_bf16"


def analysis(path: Path) -> dict[str, pd.DataFrame]:
    """Every per-rank table and summary report of `path` (collect's analyses, then `nsys stats`')."""
    out = analyse_file(path, 0)
    with Export(path) as export:
        out |= {f"stats {name}": run_report(export, name) for name in SUMMARY_REPORTS}
    return out


def same(a: dict[str, pd.DataFrame], b: dict[str, pd.DataFrame]) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        pd.testing.assert_frame_equal(a[name], b[name], obj=name)


def files(path: Path) -> dict[str, tuple[int, int]]:
    """The cache's Arrow files of `path`: name -> (size, mtime_ns)."""
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in cache_dir(path).glob("*.arrow")}


@pytest.fixture
def export(tmp_path: Path, fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HPCPROF_NSYS_CACHE", "on")
    path = tmp_path / "rank0.sqlite"
    shutil.copyfile(fixtures_dir / SEQPAR / "rank0.sqlite", path)
    return path


def uncached(path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, pd.DataFrame]:
    monkeypatch.setenv("HPCPROF_NSYS_CACHE", "off")
    try:
        return analysis(path)
    finally:
        monkeypatch.setenv("HPCPROF_NSYS_CACHE", "on")


def test_second_analysis_reads_the_cache_and_matches(export: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reference = uncached(export, monkeypatch)
    assert not cache_dir(export).exists()
    same(analysis(export), reference)
    written = files(export)
    assert len(written) >= 5                          # GPU activity, runtime, NVTX, OS runtime, overhead, ...
    # the second time every columnar read comes from the cache: reading the export would fail

    def no_scan(self: object, sql: str, *rows: int) -> None:
        raise AssertionError(f"read the export: {sql}")

    monkeypatch.setattr(arrow.ArrowConnection, "batches", no_scan)
    same(analysis(export), reference)
    assert files(export) == written                   # nothing rewritten


def test_a_changed_export_empties_the_cache(export: Path, fixtures_dir: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    analysis(export)
    before = (cache_dir(export) / "key.json").read_text()
    shutil.copyfile(fixtures_dir / SEQPAR / "rank1.sqlite", export)      # other rank, other data, same path
    fresh = analysis(export)
    assert (cache_dir(export) / "key.json").read_text() != before
    same(fresh, uncached(export, monkeypatch))
    old = uncached(fixtures_dir / SEQPAR / "rank0.sqlite", monkeypatch)
    assert fresh["kernels"]["total_ns"].sum() != old["kernels"]["total_ns"].sum()


def test_a_damaged_cache_file_is_read_again(export: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reference = uncached(export, monkeypatch)
    analysis(export)
    written = files(export)
    victim = max(written, key=lambda name: written[name][0])
    path = cache_dir(export) / victim
    path.write_bytes(path.read_bytes()[: written[victim][0] // 2])        # truncated
    same(analysis(export), reference)
    assert files(export)[victim][0] == written[victim][0]                 # made again, whole
    (cache_dir(export) / "key.json").write_text("{not json")               # a damaged key: emptied, rebuilt
    same(analysis(export), reference)
    assert set(files(export)) == set(written)


def test_small_exports_are_not_cached_by_default(export: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HPCPROF_NSYS_CACHE")
    analysis(export)
    assert not cache_dir(export).exists()


def test_a_touched_export_rebuilds_the_cache(export: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same bytes with another mtime (the key's size/mtime/schema): the cache is emptied and
    every read made again from the export, giving the same tables."""
    reference = uncached(export, monkeypatch)
    analysis(export)
    key = (cache_dir(export) / "key.json").read_text()
    written = files(export)
    st = export.stat()
    os.utime(export, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    reads: list[str] = []
    scan = arrow.ArrowConnection.batches

    def counted(self: arrow.ArrowConnection, sql: str, *rows: int) -> object:
        reads.append(sql)
        return scan(self, sql, *rows)

    monkeypatch.setattr(arrow.ArrowConnection, "batches", counted)
    same(analysis(export), reference)
    assert (cache_dir(export) / "key.json").read_text() != key
    assert len(reads) >= len(written)                                     # read from the export again
    assert set(files(export)) == set(written)
    assert all(files(export)[name][1] != written[name][1] for name in written)   # every file written anew


def csv_of(path: Path, names: list[str]) -> dict[str, str]:
    """Each report's CSV text (or why it was skipped), by the columnar engine."""
    out = {}
    with Export(path) as export:
        for name in names:
            try:
                text = io.StringIO()
                write_csv(run_table(export, name), text)
                out[name] = text.getvalue()
            except MissingData as exc:
                out[name] = f"skipped: {exc}"
    return out


def test_reports_kept_in_the_cache_give_the_same_bytes(export: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every report of both layouts: computed, then read back from the kept results (nothing
    computed: the report functions would fail), byte-identical; kept by the code that computed them."""
    names = [name for name in REPORTS if REPORTS[name].columnar.startswith("reports.")]
    monkeypatch.setenv("HPCPROF_NSYS_CACHE", "off")
    reference = csv_of(export, names)
    monkeypatch.setenv("HPCPROF_NSYS_CACHE", "on")
    assert csv_of(export, names) == reference
    kept = sorted(p.name for p in cache_dir(export).glob("result-*.json"))
    assert len(kept) == sum(not text.startswith("skipped") for text in reference.values())

    def computed(module: str, function: str) -> None:
        raise AssertionError(f"computed {module}.{function}")

    monkeypatch.setattr(stats, "implementation", lambda path: computed(*path.rsplit(".", 1)))
    assert csv_of(export, names) == reference
    victim = cache_dir(export) / kept[0]
    victim.write_text("{damaged")                             # a damaged document: computed again
    monkeypatch.undo()
    monkeypatch.setenv("HPCPROF_NSYS_CACHE", "on")
    assert csv_of(export, names) == reference
    assert json.loads(victim.read_text())["name"].startswith("stats ")
    monkeypatch.setattr(cache, "code_version", lambda: "another")   # other code: its own results
    assert csv_of(export, names) == reference
    assert len(list(cache_dir(export).glob("result-*.json"))) == 2 * len(kept)


ANALYSES = [["nccl"], ["overlap"], ["phases"], ["gaps", "--threshold-ms", "0.1"], ["critical-path"],
            ["critical-path", "--segments"]]


def cli_run(argv: list[str], inputs: list[Path]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `hpcprof nsys ARGV INPUTS --format csv`, in process."""
    from click.testing import CliRunner

    from hpcprof.cli import main

    res = CliRunner().invoke(main, ["nsys", *argv, "--format", "csv", *map(str, inputs)])
    return res.exit_code, res.stdout, res.stderr


@pytest.mark.parametrize("argv", ANALYSES, ids=" ".join)
def test_second_analysis_reads_its_kept_table(argv: list[str], export: Path, fixtures_dir: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A second `hpcprof nsys nccl|overlap|phases|gaps|critical-path` of an unchanged export gives the
    same output without loading its activity (the kept table); so do two rank files analysed one at
    a time (each file's rows kept); another option is another table; a touched export is analysed again."""
    from hpcprof.tools.nsys.analysis import distributed as dist

    rank1 = tmp_path / "rank1.sqlite"
    shutil.copyfile(fixtures_dir / SEQPAR / "rank1.sqlite", rank1)
    loads: list[int] = []
    load = dist.load_activity

    def counted(*args: object, **kwargs: object) -> dist.Activity:
        loads.append(1)
        return load(*args, **kwargs)                                        # type: ignore[arg-type]

    monkeypatch.setattr(dist, "load_activity", counted)
    for inputs in ([export], [export, rank1]):
        monkeypatch.setenv("HPCPROF_NSYS_CACHE", "off")
        reference = cli_run(argv, inputs)
        assert reference[0] == 0 and reference[1].count("\n") >= 1, reference
        monkeypatch.setenv("HPCPROF_NSYS_CACHE", "on")
        assert cli_run(argv, inputs) == reference
        del loads[:]
        assert cli_run(argv, inputs) == reference
        assert loads == []                                                  # nothing loaded: the kept tables
    if argv[0] == "gaps":
        assert cli_run(["gaps", "--threshold-ms", "1e6"], [export])[1] != reference[1]
        assert loads == [1]
        del loads[:]
    st = export.stat()
    os.utime(export, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert cli_run(argv, [export, rank1]) == reference
    assert loads == [1]                                                     # the touched export only


def test_kept_frames_come_back_equal() -> None:
    """Every column type a kept table may hold comes back equal (values, NaN/NA, dtypes); a frame
    that would not (another index, a numpy scalar in an object column) is not kept."""
    import numpy as np

    df = pd.DataFrame({"i": np.array([1, -2, 3], dtype=np.int64), "f": [1.5, np.nan, 1e300],
                       "s": pd.array(["a", None, "c"], dtype="str"), "n": pd.array([1, None, 3], dtype="Int64"),
                       "b": [True, False, True]})
    df["o"] = pd.Series(np.array(["x", None, 7], dtype=object), dtype=object)
    back = cache.frame_from_document(json.loads(json.dumps(cache.frame_document(df))))
    pd.testing.assert_frame_equal(back, df, check_exact=True)
    assert cache.frame_from_document(json.loads(json.dumps(cache.frame_document(df.iloc[:0])))).dtypes.equals(df.dtypes)
    assert cache.frame_document(df.set_index("i")) is None
    assert cache.frame_document(pd.DataFrame({"o": pd.Series([np.int64(1)], dtype=object)})) is None


def test_a_read_left_unfinished_does_not_hide_the_error(fixtures_dir: Path) -> None:
    """A caller that fails mid-read (its statement and stream still open) gets its own error, and
    the export closes: the connection closes the statements left open first."""
    def first_batch_then_fail(export: Export) -> None:
        batches = export.sql_batches("SELECT start FROM CUPTI_ACTIVITY_KIND_RUNTIME")   # held by the traceback
        next(batches)
        raise KeyError("the caller's own error")

    export = Export(fixtures_dir / SEQPAR / "rank0.sqlite")
    with pytest.raises(KeyError, match="the caller's own error"):
        with export:
            first_batch_then_fail(export)
    assert export._arrow_conns == []
