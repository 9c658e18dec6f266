"""collect's bundles (one file of Arrow tables per map task of several rank files, checked by CRC-32), the fast
DataFrame -> Arrow conversion they use, and collect's tables being the same whatever the number of
worker processes (1 vs 2 and 16; HPCPROF_TEST_WORKERS lists the counts)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from hpcprof.core.pool import (
    BundleRows,
    Compacting,
    DamagedBundle,
    concat_parts,
    concat_pieces,
    make_executor,
    read_bundle,
    read_pieces,
    write_bundle,
)
from hpcprof.run.results import to_arrow

WORKERS = [int(n) for n in os.environ.get("HPCPROF_TEST_WORKERS", "2,16").split(",")]


def frames(fixtures_dir: Path) -> dict[str, pd.DataFrame]:
    """Every table collect makes of one real export, and one frame of each awkward column kind."""
    from hpcprof.tools.nsys.analysis.collect import analyse_file

    tables = analyse_file(fixtures_dir / "nsys/h200_seqpar_bf16/rank0.sqlite", 0)
    tables["awkward"] = pd.DataFrame({
        "mixed": [1, "a", None], "ints_na": pd.array([1, None, 3], dtype="Int64"),
        "floats_nan": [1.5, np.nan, 2.0], "category": pd.Categorical(["x", "y", "x"]),
        "when": pd.to_datetime(["2026-01-01", None, "2026-01-02"]), "flags": [True, None, False],
        "text": pd.array(["a", None, "c"], dtype="string"), "empty": [None, None, None], 7: [1, 2, 3]})
    tables["no_rows"] = pd.DataFrame({"a": pd.Series(dtype=object), "b": pd.Series(dtype=np.int64)})
    return tables


def test_fast_conversion_equals_pyarrow_from_pandas(fixtures_dir: Path) -> None:
    """to_arrow without pandas metadata gives the columns pyarrow's own from_pandas gives."""
    for name, df in frames(fixtures_dir).items():
        expected = to_arrow(df).replace_schema_metadata(None)
        got = to_arrow(df, pandas_metadata=False)
        assert got.equals(expected), (name, got.schema, expected.schema)
    mixed = to_arrow(frames(fixtures_dir)["awkward"], pandas_metadata=False).column("mixed").to_pylist()
    assert mixed == ["1", "a", None]


def test_bundle_round_trip_and_damage(fixtures_dir: Path, tmp_path: Path) -> None:
    tables = {name: to_arrow(df, pandas_metadata=False) for name, df in frames(fixtures_dir).items()}
    path = write_bundle(tmp_path / "rank0.arrow", [tables])
    back = read_bundle(path)
    assert list(back) == list(tables) and all(back[n].equals(t) for n, t in tables.items())
    assert read_bundle(path, ["nccl"], schema_only=True)["nccl"] == tables["nccl"].schema
    with pytest.raises(DamagedBundle, match="no table 'absent'"):
        read_bundle(path, ["absent"])
    data = path.read_bytes()
    blob = pa.ipc.open_file(pa.py_buffer(data)).get_batch(0).column(1)[0].as_py()
    at = data.index(blob) + len(blob) // 2                        # a byte inside the first table's data
    (tmp_path / "flipped.arrow").write_bytes(data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:])
    with pytest.raises(DamagedBundle, match="CRC-32"):
        read_bundle(tmp_path / "flipped.arrow")
    (tmp_path / "cut.arrow").write_bytes(data[:len(data) // 2])
    with pytest.raises(DamagedBundle, match="cut.arrow"):
        read_bundle(tmp_path / "cut.arrow")


def test_concat_parts_unifies_schemas_in_order(tmp_path: Path) -> None:
    """Rows in the order of the parts; a column one part lacks is null there; int and float unify;
    each bundle read once for all the tables asked of it (the others' schemas stay their own)."""
    import pyarrow.parquet as pq

    first = write_bundle(tmp_path / "a.arrow", [{"t": pa.table({"x": [1, 2]}), "u": pa.table({"k": ["a"]})}])
    second = write_bundle(tmp_path / "b.arrow", [{"t": pa.table({"x": [0.5], "y": ["new"]})}])
    targets = {"t": tmp_path / "t.parquet", "u": tmp_path / "u.parquet", "v": tmp_path / "v.parquet"}
    assert concat_parts([BundleRows(second, ["t"]), BundleRows(first, ["t", "u"])], targets) == ["t", "u"]
    assert pq.read_table(tmp_path / "t.parquet").to_pydict() == {"x": [0.5, 1.0, 2.0], "y": ["new", None, None]}
    assert pq.read_table(tmp_path / "u.parquet").to_pydict() == {"k": ["a"]}
    assert not (tmp_path / "v.parquet").exists()             # no part holds it: not written
    assert concat_parts([], {"none": tmp_path / "none.parquet"}) == [] and not (tmp_path / "none.parquet").exists()


def test_concat_pieces_joins_slices_in_order_under_one_schema(tmp_path: Path) -> None:
    """The pieces of one table (each slice of ranks concatenated by a worker) joined in order:
    a column a piece lacks is null there, int and float unify, an empty piece adds no row, and at
    most `row_group` rows wait for their row group."""
    import pyarrow.parquet as pq

    pieces = [tmp_path / f"t.{i}.parquet" for i in range(3)]
    pq.write_table(pa.table({"rank": [0, 0, 1], "x": [1, 2, 3]}), pieces[0], row_group_size=2)
    pq.write_table(pa.table({"rank": pa.array([], pa.int64()), "x": pa.array([], pa.int64())}), pieces[1])
    pq.write_table(pa.table({"rank": [2], "x": [0.5], "y": ["new"]}), pieces[2])
    concat_pieces(pieces, tmp_path / "t.parquet", row_group=2)
    joined = pq.ParquetFile(tmp_path / "t.parquet")
    assert joined.read().to_pydict() == {"rank": [0, 0, 1, 2], "x": [1.0, 2.0, 3.0, 0.5],
                                         "y": [None, None, None, "new"]}
    assert [joined.metadata.row_group(i).num_rows for i in range(joined.num_row_groups)] == [2, 2]
    assert read_pieces(pieces).equals(joined.read())    # what the cross-rank steps read while the join runs


def test_compacting_keeps_order_and_merges_by_levels() -> None:
    """Items come back in order however many merges; each item is merged O(log n) times (by
    levels of `every`), never once per `every` new items (the whole list again: quadratic)."""
    merges: list[int] = []

    def merge(items: list[list[int]]) -> list[int]:
        merges.append(sum(map(len, items)))
        return [x for item in items for x in item]

    pending = Compacting(merge, every=4)
    for i in range(1000):
        pending.append([i])
    assert [x for item in pending.items() for x in item] == list(range(1000))
    assert all(len(level) < 4 for level in pending.levels) and len(pending.levels) == 5   # 4**5 > 1000
    assert sum(merges) == 1000 // 4 * 4 + 1000 // 16 * 16 + 1000 // 64 * 64 + 1000 // 256 * 256  # each level's copies


def collect_tables(exports: dict[str, int], run: Path, workers: int) -> dict[str, pd.DataFrame]:
    """collect's map and reduce over `exports` with `workers` processes, as collect_run runs them
    (the slices concatenated as the map goes): the run's tables."""
    from hpcprof.collect import map_files, reduce_parts
    from hpcprof.collect.reduce import SLICES_PER_WORKER, SliceConcat
    from hpcprof.run.results import list_tables, read_table

    problems: list[object] = []
    executor, _ = make_executor(workers)
    try:
        keys = [os.path.basename(path) for path, _ in sorted(exports.items(), key=lambda kv: kv[1])]
        concat = SliceConcat("nsys", run, keys, executor)
        mapped = map_files("nsys", exports, run, executor, lambda line: None, problems.append,
                           on_file=concat.file_done)
        submitted = len(concat.sliced)                       # all of them while the map ran
        reduce_parts("nsys", run, mapped, executor, lambda line: None, concat=concat)
    finally:
        executor.shutdown()
    assert submitted == (0 if workers == 1 else min(len(exports), workers * SLICES_PER_WORKER))
    assert problems == []
    return {name: read_table(run, name) for name in list_tables(run)}


#: rank files of that test: more than 16 workers' slices, not a multiple of them
RANKS = 37


@pytest.mark.slow
@pytest.mark.parametrize("workers", WORKERS)
def test_collect_tables_are_the_same_with_any_number_of_workers(fixtures_dir: Path, tmp_path: Path,
                                                                 workers: int) -> None:
    source = fixtures_dir / "nsys/h200_seqpar_bf16"
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    exports = {}
    for rank in range(RANKS):                                # the two real ranks, over and over
        exports[str(profiles / f"rank{rank}.sqlite")] = rank
        shutil.copy(source / f"rank{rank % 2}.sqlite", profiles / f"rank{rank}.sqlite")
    serial = collect_tables(exports, tmp_path / "serial", 1)
    parallel = collect_tables(exports, tmp_path / "parallel", workers)
    assert serial.keys() == parallel.keys() and {"nsys_nccl", "nsys_critical_path"} <= serial.keys()
    for name, table in serial.items():
        pd.testing.assert_frame_equal(parallel[name], table, obj=name)
    assert serial["nsys_cuda_gpu_kern_sum"]["rank"].unique().tolist() == list(range(RANKS))


def test_parts_of_the_layout_before_bundles_are_removed(fixtures_dir: Path, tmp_path: Path) -> None:
    """A run collected before bundles kept a directory of Parquet files per rank file: collected
    again, those are analysed again into bundles and the directories removed."""
    from hpcprof.collect import InProcess, map_files

    export = tmp_path / "rank0.sqlite"
    shutil.copy(fixtures_dir / "nsys/h200_seqpar_bf16/rank0.sqlite", export)
    old = tmp_path / "derived/nsys/parts/rank0.sqlite/results"
    old.mkdir(parents=True)
    (old / "nccl.parquet").write_bytes(b"PAR1")
    mapped = map_files("nsys", {str(export): 0}, tmp_path, InProcess(), lambda line: None, print)
    assert "nccl" in mapped["rank0.sqlite"].tables
    [manifest, bundle] = sorted(p.name for p in (tmp_path / "derived/nsys/parts").iterdir())
    assert bundle == mapped["rank0.sqlite"].bundle and bundle.startswith("rank0.sqlite.") and manifest == "manifest.feather"


@pytest.mark.parametrize("workers", [1, 2])
def test_files_of_one_map_task_are_each_on_their_own(fixtures_dir: Path, tmp_path: Path, workers: int) -> None:
    """Several files go to a worker in one task (mapping.task_size): a damaged file among them is a
    Problem of its own, a file with nothing to analyse a note, and the others of the same task are
    still collected, in and out of worker processes (their outcomes come back as plain values).
    Files given in name order (rank10 before rank2, as a directory lists them) are mapped in rank
    order: each bundle holds consecutive ranks, which the concat then reads in one run per bundle
    (not a read of the bundle per file)."""
    from hpcprof.collect import map_files
    from hpcprof.collect.mapping import TASK_FILES, MapFailure, map_task, split_tasks, task_size
    from hpcprof.collect.reduce import bundle_runs

    assert task_size(37, 2) == 2 and task_size(37, 16) == 1 and task_size(100_000, 16) == TASK_FILES == 32
    for files, workers in ((37, 2), (1000, 4), (8192, 16), (5, 16), (0, 2)):   # the workers' last round: small tasks
        tasks = split_tasks(list(range(files)), workers)
        size = task_size(files, workers)
        small = max(1, size // 4)
        assert [i for task in tasks for i in task] == list(range(files))           # every file once, in order
        assert all(len(task) <= size for task in tasks)
        assert sum(len(task) for task in tasks if len(task) <= small) >= min(files, workers * size) - small
    assert [len(task) for task in split_tasks(list(range(8192)), 16)][-65:] == [32] + [8] * 64
    exports = {}
    for rank in sorted(range(48), key=lambda r: f"rank{r}.sqlite"):   # 48 files, 2 workers: tasks of 3 files
        path = tmp_path / "profiles" / f"rank{rank}.sqlite"
        path.parent.mkdir(exist_ok=True)
        if rank == 7:
            path.write_bytes(b"not an export")
        else:
            os.link(fixtures_dir / f"nsys/h200_seqpar_bf16/rank{rank % 2}.sqlite", path)
        exports[str(path)] = rank
    problems: list[object] = []
    executor, _ = make_executor(workers)
    try:
        mapped = map_files("nsys", exports, tmp_path / "run", executor, lambda line: None, problems.append)
    finally:
        executor.shutdown()
    [problem] = problems
    assert str(problem).startswith(f"{tmp_path}/profiles/rank7.sqlite: skipped (NsysInputError: ")
    assert "not an SQLite database" in str(problem)
    assert list(mapped) == [f"rank{rank}.sqlite" for rank in range(48) if rank != 7]
    assert all("nccl" in part.tables for part in mapped.values())
    bundles = [part.bundle for part in mapped.values()]
    assert len(bundle_runs(mapped.values())) == len(set(bundles)) == len(split_tasks(list(exports), workers))
    trace = tmp_path / "rank2.json"        # a trace of CPU operators only: nothing for the analyses
    trace.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 1, "dur": 2, '
                     '"pid": 1, "tid": 1}]}')
    [note] = map_task("torch", [(str(trace), 2)], str(tmp_path / "parts"), "task.arrow", {})
    assert isinstance(note, MapFailure) and note.note and "no GPU events" in note.message


def test_a_bundle_of_several_files_reads_back_per_file(tmp_path: Path) -> None:
    """One bundle holds a map task's files: each table's rows of every file, in order, under one
    schema (a column one file lacks is null there, int and float unify); a slice of its files
    reads back exactly their rows, and a table a file lacks adds none of its rows."""
    files = [{"t": pa.table({"x": [1, 2]}), "u": pa.table({"k": ["a"]})},
             {"t": pa.table({"x": [0.5], "y": ["new"]})},
             {"t": pa.table({"x": [3, 4, 5]}), "u": pa.table({"k": ["b", "c"]})}]
    path = write_bundle(tmp_path / "task.arrow", files)
    whole = read_bundle(path)
    assert whole["t"].to_pydict() == {"x": [1.0, 2.0, 0.5, 3.0, 4.0, 5.0], "y": [None, None, "new", None, None, None]}
    assert whole["u"].to_pydict() == {"k": ["a", "b", "c"]}
    assert read_bundle(path, files=slice(1, 2))["t"].to_pydict() == {"x": [0.5], "y": ["new"]}
    assert read_bundle(path, ["u"], files=slice(1, 3))["u"].to_pydict() == {"k": ["b", "c"]}
    assert read_bundle(path, ["u"], files=slice(1, 2))["u"].num_rows == 0


@pytest.mark.slow
def test_a_changed_file_is_mapped_again_alone_and_superseded_bundles_go(fixtures_dir: Path, tmp_path: Path) -> None:
    """Collected again after one rank file of a map task changed, only that file is analysed
    again: the others' rows are read from their task's bundle around it, and the run's tables are
    those of a fresh collect; a bundle no file names any more is removed."""
    from hpcprof.collect import InProcess, map_files, reduce_parts
    from hpcprof.run.results import list_tables, read_table

    profiles = tmp_path / "profiles"
    profiles.mkdir()
    exports = {}
    for rank in range(40):                                  # one process: tasks of 5 files
        exports[str(profiles / f"rank{rank:02d}.sqlite")] = rank
        shutil.copy(fixtures_dir / f"nsys/h200_seqpar_bf16/rank{rank % 2}.sqlite", profiles / f"rank{rank:02d}.sqlite")

    def collect(run: Path) -> tuple[dict, dict[str, pd.DataFrame]]:
        lines: list[str] = []
        mapped = map_files("nsys", exports, run, InProcess(), lines.append, print)
        reduce_parts("nsys", run, mapped, InProcess(), lambda line: None)
        return mapped, {name: read_table(run, name) for name in list_tables(run)}

    first, _ = collect(tmp_path / "run")
    assert len({part.bundle for part in first.values()}) == 8
    changed = profiles / "rank12.sqlite"                    # the middle of the third task
    shutil.copy(fixtures_dir / "nsys/h200_seqpar_bf16/rank1.sqlite", changed)   # other rows, same rank
    again, tables = collect(tmp_path / "run")
    assert again["rank12.sqlite"].bundle != first["rank12.sqlite"].bundle
    assert {k: p for k, p in again.items() if k != "rank12.sqlite"} == {k: p for k, p in first.items()
                                                                           if k != "rank12.sqlite"}
    _, fresh = collect(tmp_path / "fresh")
    assert tables.keys() == fresh.keys()
    for name, table in fresh.items():
        pd.testing.assert_frame_equal(tables[name], table, obj=name)
    for rank in range(10, 15):                              # the whole third task changes: its bundle goes
        os.utime(profiles / f"rank{rank}.sqlite", ns=(1, 1))
    latest, _ = collect(tmp_path / "run")
    bundles = {p.name for p in (tmp_path / "run/derived/nsys/parts").glob("*.arrow")}
    assert bundles == {part.bundle for part in latest.values()}
    assert first["rank10.sqlite"].bundle not in bundles and again["rank12.sqlite"].bundle not in bundles


def test_a_bundle_that_cannot_be_written_skips_its_files_with_the_reason(fixtures_dir: Path, tmp_path: Path) -> None:
    """The task's files are then each a MapFailure naming the write's reason, as a file that did
    not read is (collect reports them and goes on), not an exception that ends the collect."""
    from hpcprof.collect.mapping import MapFailure, map_task

    not_a_dir = tmp_path / "parts"
    not_a_dir.write_text("a file where the parts directory should be")
    export = str(fixtures_dir / "nsys/h200_seqpar_bf16/rank0.sqlite")
    outcomes = map_task("nsys", [(export, 0), (export, 1)], str(not_a_dir), "task.arrow", {})
    assert len(outcomes) == 2 and all(isinstance(o, MapFailure) and not o.note for o in outcomes)
    assert "parts" in outcomes[0].message, outcomes[0].message


def test_the_manifest_keeps_what_was_mapped_and_one_that_does_not_read_maps_all_again(fixtures_dir: Path,
                                                                                   tmp_path: Path) -> None:
    """The parts' manifest (an Arrow file) holds each mapped file's size, mtime, rank, bundle,
    position and tables: a second collect skips every file it names; a manifest that does not
    read (truncated) is a cache miss, every file mapped again to the same parts; the JSON
    manifest of earlier versions is neither read nor left behind."""
    from hpcprof.collect import InProcess, map_files
    from hpcprof.collect.cache import MANIFEST, OLD_MANIFEST, ManifestEntry, load_manifest

    exports = {}
    for rank in range(3):
        exports[str(tmp_path / f"rank{rank}.sqlite")] = rank
        shutil.copy(fixtures_dir / f"nsys/h200_seqpar_bf16/rank{rank % 2}.sqlite", tmp_path / f"rank{rank}.sqlite")
    parts = tmp_path / "run/derived/nsys/parts"
    parts.mkdir(parents=True)
    (parts / OLD_MANIFEST).write_text('{"rank0.sqlite": {"size": 1}}')

    def collect() -> tuple[dict, list[str]]:
        lines: list[str] = []
        return map_files("nsys", exports, tmp_path / "run", InProcess(), lines.append, print), lines

    first, lines = collect()
    assert not any("unchanged" in line for line in lines) and not (parts / OLD_MANIFEST).exists()
    entries = load_manifest(parts)
    assert entries == {f"rank{rank}.sqlite": ManifestEntry(path.stat().st_size, path.stat().st_mtime_ns, rank,
                                                            first[path.name].bundle, first[path.name].position,
                                                            first[path.name].tables)
                       for path, rank in ((Path(text), rank) for text, rank in exports.items())}
    assert len(first["rank0.sqlite"].tables) > 10
    again, lines = collect()
    assert again == first and "nsys: 3 file(s) unchanged since the last collect, skipped" in lines
    (parts / MANIFEST).write_bytes((parts / MANIFEST).read_bytes()[:-40])
    assert load_manifest(parts) == {}
    remapped, lines = collect()
    assert remapped == first and not any("unchanged" in line for line in lines)


def test_the_listing_pauses_garbage_collection_and_no_worker_starts_without_it(fixtures_dir: Path,
                                                                               tmp_path: Path) -> None:
    """gc_paused turns cyclic collection off in its block and back to what it was after it (also
    when the block raises); map_files lists under it and forks its workers after it, so each
    worker, and this process after the map, collect garbage as before."""
    import gc

    from hpcprof.collect import map_files
    from hpcprof.collect.common import gc_paused

    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        assert not gc.isenabled()
        raise RuntimeError("the block's error")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()                       # off before: left off
    finally:
        gc.enable()
    export = str(fixtures_dir / "nsys/h200_seqpar_bf16/rank0.sqlite")
    executor, _ = make_executor(2)
    try:
        mapped = map_files("nsys", {export: 0}, tmp_path / "run", executor, lambda line: None, print)
        workers_collect = {executor.submit(gc.isenabled).result() for _ in range(4)}
    finally:
        executor.shutdown()
    assert list(mapped) == ["rank0.sqlite"] and workers_collect == {True} and gc.isenabled()
