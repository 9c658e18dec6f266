"""collect's engine, generic over what it runs: executors (this process, a process pool, or
`mpi4py.futures` workers under mpiexec), progress with an ETA, a bounded streaming map over an
executor, bundles (several Arrow tables in one file, checked by CRC), and streaming
reduces (tables of bundles into one Parquet file, data frames into one) that hold one
part in memory at a time. It knows nothing of runs, tools or profiles (hpcprof.collect.runs does).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import os
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from hpcprof.atomic import atomic_write

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

Log = Callable[[str], None]
K = TypeVar("K", bound=Hashable)


def under_mpi_futures() -> bool:
    """True when started by `mpiexec ... python -m mpi4py.futures` with more than one process."""
    if not any(k in os.environ for k in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")):
        return False
    if "mpi4py.futures" not in sys.modules:
        return False
    from mpi4py import MPI

    return bool(MPI.COMM_WORLD.Get_size() > 1)


class InProcess(Executor):
    """Runs each task at once in this process (1 worker: no pool, no pickling)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the caller through the future
            future.set_exception(exc)
        return future


def make_executor(workers: int, preload: Iterable[str] = ()) -> tuple[Executor, str]:
    """mpi4py.futures workers under mpiexec, else a process pool of `workers` (1: this process)
    (a fork server imports `preload` before forking them); with a description for the log."""
    if under_mpi_futures():
        from mpi4py import MPI
        from mpi4py.futures import MPIPoolExecutor

        return MPIPoolExecutor(), f"{MPI.COMM_WORLD.Get_size() - 1} mpi4py.futures worker(s)"
    if workers <= 1:
        return InProcess(), "1 process"
    return ProcessPoolExecutor(workers, mp_context=worker_context(preload)), f"{workers} worker processes"


def worker_context(preload: Iterable[str] = ()) -> multiprocessing.context.BaseContext:
    """How worker processes start: forked from this process while it runs no other Python thread
    (the cheapest start: 0.9 s against 2.2 s for `hpcprof trace` on 2 x 72 MB traces, the workers
    share its imports), else forked from a fork server (a clean process that imported `preload`
    once): a fork of a process running threads (a notebook's, rich's progress, an executor's) can
    inherit a lock one of them holds and hang in the child. (Native pools such as OpenBLAS's reset
    themselves at fork.)"""
    if threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(preload))
    return context


class Progress:
    """Files and bytes done with an ETA: a rich bar on a terminal, else a few plain log lines."""

    def __init__(self, label: str, total_files: int, total_bytes: int, log: Log) -> None:
        self.label, self.total, self.bytes, self.log = label, total_files, total_bytes, log
        self.done = self.done_bytes = 0
        self.start = time.monotonic()
        self.bar = None
        if sys.stderr.isatty() and total_files > 1:
            from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as Bar

            self.bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                           DownloadColumn(), TimeRemainingColumn(), transient=True)
            self.task = self.bar.add_task(label, total=total_bytes)
            self.bar.start()

    def advance(self, nbytes: int) -> None:
        self.done += 1
        self.done_bytes += nbytes
        if self.bar is not None:
            self.bar.update(self.task, advance=nbytes, description=f"{self.label} {self.done}/{self.total} files")
            return
        step = max(1, self.total // 10)
        if self.done % step == 0 or self.done == self.total:
            elapsed = time.monotonic() - self.start
            eta = elapsed / self.done_bytes * (self.bytes - self.done_bytes) if self.done_bytes else 0.0
            self.log(f"{self.label}: {self.done}/{self.total} files, {self.done_bytes / 1e6:.1f}/"
                     f"{self.bytes / 1e6:.1f} MB, {elapsed:.1f} s, ETA {eta:.0f} s")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def stream_map(executor: Executor, fn: Callable[..., Any], jobs: Iterable[tuple[K, tuple[Any, ...]]],
               in_flight: int = 1024) -> Iterator[tuple[K, Future]]:
    """`fn(*args)` for each `(key, args)` of `jobs` in `executor`, at most `in_flight` submitted at
    a time (jobs are read lazily); yields `(key, finished future)` as workers finish (in job order
    with one in flight). The caller takes each result or exception from its future."""
    queue = iter(jobs)
    running: dict[Future, K] = {}

    def submit_next() -> None:
        for key, args in queue:
            running[executor.submit(fn, *args)] = key
            return

    for _ in range(max(1, in_flight)):
        submit_next()
    while running:
        future = next(as_completed(running))
        key = running.pop(future)
        submit_next()
        yield key, future


#: a bundle's columns: each table's name, its Arrow IPC stream, the CRC-32 of that stream
BUNDLE_COLUMNS = ("name", "ipc", "crc32")


class DamagedBundle(Exception):
    """A bundle (or one table in it) that does not read back as written."""


def write_bundle(path: Path, tables: dict[str, pa.Table]) -> Path:
    """Write several Arrow tables into one file at `path` (atomically): an Arrow IPC file of one
    row per table, its IPC stream and that stream's CRC-32 (Arrow checks no data, the CRC does).
    One file per map task instead of one per table: the write and the rename are paid once."""
    import zlib

    import pyarrow as pa

    blobs = []
    for table in tables.values():
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as stream:
            stream.write_table(table)
        blobs.append(sink.getvalue().to_pybytes())
    bundle = pa.table([pa.array(list(tables), pa.string()), pa.array(blobs, pa.binary()),
                       pa.array([zlib.crc32(b) for b in blobs], pa.uint32())], names=list(BUNDLE_COLUMNS))

    def write(tmp: Path) -> None:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, bundle.schema) as writer:
            writer.write_table(bundle)

    return atomic_write(path, write, what="collect part")


def read_bundle(path: Path, names: Iterable[str] | None = None, schema_only: bool = False) -> dict[str, Any]:
    """The tables `names` (all when None) of the bundle at `path`, by name: Arrow tables, or
    their schemas when `schema_only` (the CRC is then not checked). DamagedBundle when the file
    does not read, a table is missing or its CRC differs."""
    import zlib

    import pyarrow as pa

    try:
        reader = pa.ipc.open_file(pa.py_buffer(Path(path).read_bytes()))   # small: read whole, not mapped
        if reader.num_record_batches != 1 or reader.schema.names != list(BUNDLE_COLUMNS):
            raise DamagedBundle(f"{path}: not a collect part")
        bundle = reader.get_batch(0)
        index = {name: i for i, name in enumerate(bundle.column(0).to_pylist())}
        wanted = list(index) if names is None else list(names)
        out: dict[str, Any] = {}
        for name in wanted:
            if name not in index:
                raise DamagedBundle(f"{path}: no table {name!r}")
            blob = bundle.column(1)[index[name]].as_buffer()
            reader = pa.ipc.open_stream(blob)
            if schema_only:
                out[name] = reader.schema
                continue
            if zlib.crc32(blob) != bundle.column(2)[index[name]].as_py():
                raise DamagedBundle(f"{path}: table {name!r} does not match its CRC-32")
            out[name] = reader.read_all()
        return out
    except (OSError, pa.ArrowException) as exc:
        raise DamagedBundle(f"{path}: {str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}") from None


def concat_parts(parts: list[tuple[Path, str]], target: Path, row_group: int = 262_144,
                 compact_every: int = 64) -> bool:
    """Stream the tables `parts` (each a bundle's path and a table name in it) into one Parquet
    file `target`, in that order, under one schema unifying theirs: one part (and one row group of
    at most `row_group` rows) in memory at a time. The parts waiting for their row group are merged
    into one contiguous table every `compact_every` parts (thousands of small Arrow tables cost far
    more memory than their rows). Each part is read once when all have the first one's schema (the
    usual case), else their schemas are read and unified first and the parts read again. False
    when there is no part; DamagedBundle for a part that does not read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not parts:
        return False

    class Reschema(Exception):
        """A part whose schema differs from the first one's: unify them all, then write again."""

    def write(tmp: Path, schema: pa.Schema | None) -> None:
        writer: pq.ParquetWriter | None = None
        try:
            pending: list[pa.Table] = []
            rows = 0
            for path, name in parts:
                table = read_bundle(path, [name])[name].replace_schema_metadata(None)
                if schema is None:
                    schema = table.schema
                if not table.schema.equals(schema):
                    if not unified:
                        raise Reschema
                    for column in schema.names:
                        if column not in table.column_names:
                            table = table.append_column(column, pa.nulls(len(table), schema.field(column).type))
                    table = table.select(schema.names).cast(schema)
                if writer is None:
                    writer = pq.ParquetWriter(tmp, schema)
                pending.append(table)
                rows += len(table)
                if len(pending) >= compact_every:
                    pending = [pa.concat_tables(pending).combine_chunks()]
                if rows >= row_group:
                    writer.write_table(pa.concat_tables(pending))
                    pending, rows = [], 0
            if writer is None:
                writer = pq.ParquetWriter(tmp, schema)
            if pending:
                writer.write_table(pa.concat_tables(pending))
        finally:
            if writer is not None:
                writer.close()

    unified = False
    try:
        atomic_write(target, lambda tmp: write(tmp, None), what="result table")
    except Reschema:
        schema = None
        for path, name in parts:  # one running schema, not one per part
            other = read_bundle(path, [name], schema_only=True)[name].remove_metadata()
            if schema is None:
                schema = other
            elif not other.equals(schema):
                schema = pa.unify_schemas([schema, other], promote_options="permissive")
        unified = True
        atomic_write(target, lambda tmp: write(tmp, schema), what="result table")
    return True


def concat_frames(frames: Iterable[pd.DataFrame], compact_every: int = 64) -> pd.DataFrame | None:
    """The frames concatenated in order, merged every `compact_every` frames as they stream in
    (thousands of small frames cost far more memory than their rows); empty frames are left out
    unless all are empty (they would change the dtypes). None when there is no frame."""
    import pandas as pd

    def merged(parts: list[pd.DataFrame]) -> pd.DataFrame:
        return pd.concat([f for f in parts if len(f)] or parts[:1], ignore_index=True)

    pending: list[pd.DataFrame] = []
    for frame in frames:
        pending.append(frame)
        if len(pending) >= compact_every:
            pending = [merged(pending)]
    return merged(pending) if pending else None
