"""The reduce of collect: the run's tables concatenated from the map's bundles (slice by slice while
the map goes on, SliceConcat) and its tool's cross-rank steps (ToolCollector.reducers), all in
worker tasks, so that the collecting process never holds the rows of all ranks."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import TYPE_CHECKING

from hpcprof.collect.cache import MANIFEST, FilePart, parts_dir
from hpcprof.collect.common import Timed, short, untimed
from hpcprof.core.atomic import temp_path, track_temporary
from hpcprof.core.catalog import table_name
from hpcprof.core.pool import (
    BundleRows,
    InProcess,
    Log,
    concat_parts,
    concat_pieces,
    executor_workers,
    read_pieces,
)
from hpcprof.run.results import write_table

if TYPE_CHECKING:
    import pandas as pd

#: contiguous slices of the rank files per worker, each concatenated as soon as its files are mapped (SliceConcat)
SLICES_PER_WORKER = 4


def cross_rank_tables(tool: str, run_path: Path, step: int,
                      pieces: dict[str, list[Path]] | None = None) -> tuple[list[str], list[str]]:
    """Cross-rank step `step` of the tool (its reducers()) over the run's concatenated tables (read
    from their slices' `pieces` where given, else from results/), written to results/; returns
    (table names written, notes to log)."""
    from hpcprof.analysis.registry import collector
    from hpcprof.run.results import read_table

    def read(name: str) -> pd.DataFrame | None:
        if pieces is None:
            return read_table(run_path, table_name(tool, name))
        return read_pieces(pieces[name]).to_pandas() if name in pieces else None

    notes: list[str] = []
    written = []
    reducer = collector(tool).reducers()[step]
    for name, df in reducer(read, notes.append).items():
        write_table(run_path, table_name(tool, name), df)
        written.append(table_name(tool, name))
    return written, notes


def bundle_runs(mapped: Iterable[FilePart]) -> list[tuple[str, int, int, list[str]]]:
    """The files of `mapped` (in order) as runs of consecutive files of one bundle: (bundle, first
    file, end file, the tables any of them has, in order); files without tables are left out."""
    runs: list[tuple[str, int, int, list[str]]] = []
    for part in mapped:
        if not part.tables:
            continue
        if runs and runs[-1][0] == part.bundle and runs[-1][2] == part.position:
            bundle, first, _, tables = runs[-1]
            more = [name for name in part.tables if name not in tables]
            runs[-1] = (bundle, first, part.position + 1, tables + more if more else tables)
        else:
            runs.append((part.bundle, part.position, part.position + 1, part.tables))
    return runs


def _concat_slice(parts: Path, held: list[tuple[str, int, int, list[str]]], targets: dict[str, Path]) -> list[str]:
    """concat_parts of the bundle runs `held` into `targets`, in a worker: the bundle paths are
    made here, so that the collecting process sends each worker only their names."""
    return concat_parts([BundleRows(parts / bundle, tables, slice(first, end)) for bundle, first, end, tables in held],
                        targets)


class SliceConcat:
    """The concat step of the reduce, run alongside the map: the run's rank files (`keys`, in rank
    order) cut into contiguous slices, SLICES_PER_WORKER per worker; as soon as every file of a
    slice has its outcome (file_done), a worker concatenates the slice's bundles into a Parquet
    piece per table (_concat_slice: every bundle read once), so that only the last slices and the
    join of each table's pieces, in order, into results/ (finish) are left when the map ends.
    With one worker the files are concatenated straight into results/ by finish."""

    def __init__(self, tool: str, run_path: Path, keys: list[str], executor: Executor) -> None:
        self.tool, self.run_path, self.executor = tool, run_path, executor
        self.parts = parts_dir(run_path, tool)
        workers = executor_workers(executor)
        count = 1 if workers == 1 else max(1, min(len(keys), workers * SLICES_PER_WORKER))
        self.slice_of = {key: i * count // len(keys) for i, key in enumerate(keys)}
        self.left = [0] * count
        for i in self.slice_of.values():
            self.left[i] += 1
        self.files: list[dict[str, FilePart]] = [{} for _ in range(count)]
        self.order = {key: i for i, key in enumerate(keys)}
        self.sliced: dict[int, Future] = {}
        # this collect's own (a concurrent collect of the run has its own; a killed one's is removed as
        # a stale temporary, atomic.remove_stale_temps)
        self.pieces = temp_path(run_path / "derived" / tool / "pieces")
        track_temporary(self.pieces)   # removed on SIGTERM too

    def file_done(self, key: str, part: FilePart | None) -> None:
        """File `key` has its outcome: its part, or None (no tables, or skipped)."""
        i = self.slice_of[key]
        if part is not None and part.tables:
            self.files[i][key] = part
        self.left[i] -= 1
        if not self.left[i] and len(self.left) > 1:
            self._submit(i)

    def _submit(self, i: int) -> None:
        parts = sorted(self.files[i].items(), key=lambda kv: self.order[kv[0]])
        self.files[i] = {}                      # the slice's parts are its task's now
        if not parts:
            return
        names = sorted({name for _, part in parts for name in part.tables})
        self.pieces.mkdir(parents=True, exist_ok=True)
        self.sliced[i] = self.executor.submit(_concat_slice, self.parts, bundle_runs(p for _, p in parts),
                                              {name: self.pieces / f"{name}.{i}.parquet" for name in names})

    def finish(self, cross_rank: Callable[[dict[str, list[Path]] | None], list[Future]], rewritten: Iterable[str],
               timed: Timed = untimed) -> tuple[list[str], list[tuple[list[str], list[str]]]]:
        """Wait for the slices (phase `concat`), then join each table's pieces into results/ while the
        cross-rank steps (`cross_rank(pieces)`: their futures) read the pieces (phase `join, cross-rank`);
        a table in `rewritten` is joined only where no step wrote it. With one slice the tables are
        concatenated straight into results/, which the steps read then (`cross_rank(None)`).
        Returns the table names written and the steps' outcomes (a step's error is raised once every
        table is written; DamagedCache when a cached part does not read: the manifest is dropped)."""
        from hpcprof.run.results import table_path

        def damaged(exc: Exception) -> DamagedCache:  # a cached part whose footer reads but whose data does not
            (self.parts / MANIFEST).unlink(missing_ok=True)  # every part is made again
            return DamagedCache(f"{self.parts}: a cached part does not read ({short(exc)})")

        def target(name: str) -> Path:
            return table_path(self.run_path, table_name(self.tool, name))

        def join(pieces: dict[str, list[Path]], names: Iterable[str]) -> list[Future]:
            return [self.executor.submit(concat_pieces, pieces[name], target(name)) for name in names]

        pieces: dict[str, list[Path]] | None = None
        try:
            with timed("concat"):
                if len(self.left) == 1:
                    parts = sorted(self.files[0].items(), key=lambda kv: self.order[kv[0]])
                    names = sorted({name for _, part in parts for name in part.tables})
                    tables = sorted(self.executor.submit(_concat_slice, self.parts, bundle_runs(p for _, p in parts),
                                                         {name: target(name) for name in names}).result())
                else:
                    in_slice = [self.sliced[i].result() if i in self.sliced else [] for i in range(len(self.left))]
                    tables = sorted({name for written in in_slice for name in written})
                    pieces = {name: [self.pieces / f"{name}.{i}.parquet" for i, written in enumerate(in_slice)
                                     if name in written] for name in tables}
        except Exception as exc:
            shutil.rmtree(self.pieces, ignore_errors=True)
            track_temporary(self.pieces, False)
            raise damaged(exc) from None
        failed: Exception | None = None
        try:
            with timed("cross-rank" if pieces is None else "join, cross-rank"):
                joined = [] if pieces is None else join(pieces, (name for name in tables if name not in rewritten))
                outcomes = []
                for future in cross_rank(pieces):
                    try:
                        outcomes.append(future.result())
                    except Exception as exc:  # raised once the tables are joined
                        failed = failed or exc
                if pieces is not None:
                    made = {name for reduced, _ in outcomes for name in reduced}
                    joined += join(pieces, (name for name in tables
                                            if name in rewritten and table_name(self.tool, name) not in made))
                    raced = sorted(made & {table_name(self.tool, name) for name in tables if name not in rewritten})
                    if raced:   # joined at the same time: which one is left is chance
                        failed = failed or RuntimeError(f"a cross-rank step of {self.tool} replaced {', '.join(raced)}, "
                                                        "which its collector's `rewritten` does not name")
                try:
                    for future in joined:
                        future.result()
                except Exception as exc:
                    raise damaged(exc) from None
        finally:
            shutil.rmtree(self.pieces, ignore_errors=True)
            track_temporary(self.pieces, False)
        if failed is not None:
            raise failed
        return tables, outcomes


def reduce_parts(tool: str, run_path: Path, mapped: dict[str, FilePart], executor: Executor | None = None,
                 log: Log = print, timed: Timed = untimed, concat: SliceConcat | None = None) -> list[str]:
    """Tables of the whole run from the per-file parts: each table concatenated (`concat`, the
    SliceConcat that map_files fed, finished; else one made of `mapped`) and the tool's cross-rank
    steps (e.g. nsys's NCCL summary across ranks), each in its own task, all in `executor`'s workers
    so that this process never holds the rows of all ranks (phases: SliceConcat.finish). Returns
    the table names written."""
    from hpcprof.analysis.registry import collector

    executor = executor or InProcess()
    if concat is None:
        concat = SliceConcat(tool, run_path, list(mapped), executor)
        for key, part in mapped.items():
            concat.file_done(key, part)
    tool_collector = collector(tool)

    def cross_rank(pieces: dict[str, list[Path]] | None) -> list[Future]:
        return [executor.submit(cross_rank_tables, tool, run_path, i, pieces)
                for i in range(len(tool_collector.reducers()))]

    tables, done = concat.finish(cross_rank, tool_collector.rewritten, timed)
    written = [table_name(tool, name) for name in tables]
    for line in (line for _, notes in done for line in notes):
        log(line)
    return written + [name for reduced, _ in done for name in reduced if name not in written]


class DamagedCache(Exception):
    """collect's own cache of per-file parts is damaged: it is made again."""
