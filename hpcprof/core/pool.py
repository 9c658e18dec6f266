"""collect's engine, generic over what it runs: executors (this process, a process pool, or
`mpi4py.futures` workers under mpiexec), progress with an ETA, a bounded streaming map over an
executor, bundles (several Arrow tables in one file, checked by CRC), and streaming
reduces (tables of bundles into one Parquet file, data frames into one) that hold one
part in memory at a time. It knows nothing of runs, tools or profiles (hpcprof.collect does).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import multiprocessing
import multiprocessing.context
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from hpcprof.core.atomic import atomic_write, stop_on_sigterm
from hpcprof.core.cpus import default_workers, usable_cpus

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

Log = Callable[[str], None]
K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class Compacting(Generic[T]):
    """Items kept in the order appended, merged `every` at a time as they come: thousands of small
    tables cost far more memory than their rows, and merging the whole list again every `every`
    items would copy each row once per merge (quadratic); merged by levels, each row is copied
    O(log n) times and at most `every` items a level are held."""

    def __init__(self, merge: Callable[[list[T]], T], every: int = 64) -> None:
        self.merge, self.every = merge, max(2, every)
        self.levels: list[list[T]] = [[]]

    def append(self, item: T) -> None:
        self.levels[0].append(item)
        level = 0
        while len(self.levels[level]) >= self.every:
            merged = self.merge(self.levels[level])
            self.levels[level] = []
            if level + 1 == len(self.levels):
                self.levels.append([])
            self.levels[level + 1].append(merged)
            level += 1

    def items(self) -> list[T]:
        """Every item (some merged), oldest first."""
        return [item for level in reversed(self.levels) for item in level]


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


def executor_workers(executor: Executor) -> int:
    """How many tasks `executor` runs at once: 1 in this process, a pool's size, else the CPUs."""
    if isinstance(executor, InProcess):
        return 1
    return int(getattr(executor, "_max_workers", 0) or usable_cpus())


def cores_per_file(executor: Executor, files: int) -> int:
    """The cores each of `files` files mapped at once by `executor` may use: its share of a process
    pool's workers where they outnumber the files, else 1 (and always 1 in this process or under
    mpi4py.futures, whose MPI processes start no processes of their own)."""
    if not isinstance(executor, ProcessPoolExecutor) or files < 1:
        return 1
    return max(1, executor_workers(executor) // files)


def make_executor(workers: int | None, preload: Iterable[str] = ()) -> tuple[Executor, str]:
    """mpi4py.futures workers under mpiexec, else a process pool of `workers` (1: this process;
    None: cpus.default_workers, the CPUs this process may use as memory allows) (a fork server
    imports `preload` before forking them); with a description for the log, saying how many and why."""
    if under_mpi_futures():
        from mpi4py import MPI
        from mpi4py.futures import MPIPoolExecutor

        return MPIPoolExecutor(), f"{MPI.COMM_WORLD.Get_size() - 1} mpi4py.futures worker(s)"
    why = "--workers"
    if workers is None:
        workers, why = default_workers()
        why += "; --workers sets another number"
    if workers <= 1:
        return InProcess(), f"1 process ({why})"
    return process_pool(workers, worker_context(preload)), f"{workers} worker processes ({why})"


def process_pool(workers: int, context: multiprocessing.context.BaseContext) -> ProcessPoolExecutor:
    """A process pool of `workers` started by `context`, whose workers die with this process
    (die_with_parent) and are stopped with it by SIGTERM (atomic.stop_on_sigterm): every pool
    hpcprof starts is made here."""
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=die_with_parent, initargs=(os.getpid(),))
    _pools.add(pool)
    stop_on_sigterm(_pool_workers)
    return pool


#: the process pools this process started (process_pool), for _pool_workers
_pools: weakref.WeakSet[ProcessPoolExecutor] = weakref.WeakSet()


def _pool_workers() -> list[int]:
    """The PIDs of the live pools' workers: stopped with SIGTERM when this process gets it, so that
    they remove their temporaries in flight (atomic.stop_on_sigterm)."""
    return [pid for pool in list(_pools) for pid in list(getattr(pool, "_processes", None) or {})]


#: prctl(2) option: the signal this process gets when its parent dies (Linux)
PR_SET_PDEATHSIG = 1


def die_with_parent(owner: int) -> None:
    """A worker's first step: it is killed (SIGKILL) when the process that started it dies, however
    that one dies (SIGKILL, SIGTERM, a crash), so that no worker runs on for nobody, reparented to
    init; where that process, or `owner` (the pool's owner: the parent, or the fork server's parent),
    is already gone, it exits now. Linux: prctl(PR_SET_PDEATHSIG) through ctypes (a fork server's
    workers die with it, and it ends with its owner); elsewhere the pool's own shutdown is all there
    is. The temporaries a killed worker left are removed by the next collect (atomic.remove_stale_temps)."""
    import ctypes
    import signal

    parent = os.getppid()
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        os._exit(1)
    except OSError:
        pass
    if os.getppid() != parent:   # the parent died before prctl took effect
        os._exit(1)


@functools.cache
def _freeze_inherited_at_fork() -> None:
    """From now on, a process forked from this one starts with what it inherits frozen (once)."""
    os.register_at_fork(after_in_child=gc.freeze)


def worker_context(preload: Iterable[str] = ()) -> multiprocessing.context.BaseContext:
    """How worker processes start: forked from this process while it runs no other Python thread
    (the cheapest start, benchmarks/results/trace_speed.txt: the workers
    share its imports), else forked from a fork server (a clean process that imported `preload`
    once): a fork of a process running threads (a notebook's, rich's progress, an executor's) can
    inherit a lock one of them holds and hang in the child. (Native pools such as OpenBLAS's reset
    themselves at fork.) Forked from this process, `preload` is imported here first, so that no
    worker imports it again (a worker forked before pandas was imported pays for it itself); each
    worker then keeps the objects it inherits out of its garbage collector's reach (gc.freeze at
    fork): its collections would otherwise write to every one of them and so copy each page they
    are on (a 2-worker collect: 17 -> 9 page faults per rank file, its map 4 % faster)."""
    if threading.active_count() == 1:
        for module in preload:
            with contextlib.suppress(ImportError):     # as a fork server's preload
                importlib.import_module(module)
        _freeze_inherited_at_fork()
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

    def advance(self, nbytes: int, files: int = 1) -> None:
        self.done += files
        self.done_bytes += nbytes
        if self.bar is not None:
            self.bar.update(self.task, advance=nbytes, description=f"{self.label} {self.done}/{self.total} files")
            return
        step = max(1, self.total // 10)
        if self.done // step > (self.done - files) // step or self.done == self.total:
            elapsed = time.monotonic() - self.start
            eta = elapsed / self.done_bytes * (self.bytes - self.done_bytes) if self.done_bytes else 0.0
            self.log(f"{self.label}: {self.done}/{self.total} files, {self.done_bytes / 1e6:.1f}/"
                     f"{self.bytes / 1e6:.1f} MB, {elapsed:.1f} s, ETA {eta:.0f} s")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def stream_map(executor: Executor, fn: Callable[..., Any], jobs: Iterable[tuple[K, tuple[Any, ...]]],
               in_flight: int = 1024, meanwhile: Callable[[], None] | None = None) -> Iterator[tuple[K, Future]]:
    """`fn(*args)` for each `(key, args)` of `jobs` in `executor`, at most `in_flight` submitted at
    a time (jobs are read lazily); yields `(key, finished future)` as workers finish (in job order
    with one in flight). `meanwhile()`, if given, runs here once the first jobs are submitted:
    work of this process that overlaps the workers'. The caller takes each result or exception
    from its future. Each future reports its own completion (a queue fed by its done callback):
    waiting costs nothing per future in flight, where `as_completed` over them all costs ~1-2 ms
    of this process's CPU per file at 1,024 in flight."""
    import queue

    pending = iter(jobs)
    finished: queue.SimpleQueue[Future] = queue.SimpleQueue()
    running: dict[Future, K] = {}

    def submit_next() -> None:
        for key, args in pending:
            future = executor.submit(fn, *args)
            running[future] = key
            future.add_done_callback(finished.put)        # at once when it is already done
            return

    for _ in range(max(1, in_flight)):
        submit_next()
    if meanwhile is not None:
        meanwhile()
    while running:
        future = finished.get()
        key = running.pop(future)
        submit_next()
        yield key, future


#: a bundle's columns: each table's name, its Arrow IPC stream (the rows of every file of the
#: bundle that has the table, in the bundle's file order), each file's number of rows in it, and
#: the CRC-32 of the stream and those numbers
BUNDLE_COLUMNS = ("name", "ipc", "rows", "crc32")


class DamagedBundle(Exception):
    """A bundle (or one table in it) that does not read back as written."""


class BundleRows(NamedTuple):
    """Rows of one bundle for concat_parts: its path, the tables wanted, and whose rows (a slice
    of the bundle's files; all of them by default)."""

    path: Path
    tables: list[str]
    files: slice = slice(None)


def _crc(blob: bytes, rows: list[int]) -> int:
    import zlib

    return zlib.crc32(",".join(map(str, rows)).encode(), zlib.crc32(blob))


def write_bundle(path: Path, files: list[dict[str, pa.Table]]) -> Path:
    """Write the tables of several files (a map task's) into one file at `path` (atomically): an
    Arrow IPC file of one row per table name, with that table's rows of all `files`, in order,
    under one schema unifying theirs, as one IPC stream, each file's number of rows in it (none
    where a file lacks the table) and a CRC-32 (Arrow checks no data, the CRC does). One file and
    one stream per table for the whole task: the write, the rename and the reduce's reads are
    paid once per task, not once per file and table."""
    import pyarrow as pa

    names = list(dict.fromkeys(name for tables in files for name in tables))
    blobs, rows = [], []
    for name in names:
        parts = [t[name] for t in files if name in t]
        first = parts[0].schema
        if first.metadata or not all(part.schema.equals(first) for part in parts[1:]):   # unified (slower)
            table = pa.concat_tables([part.replace_schema_metadata(None) for part in parts], promote_options="permissive")
        else:
            table = pa.concat_tables(parts)
        table = table.combine_chunks()                    # one record batch: its IPC is ~5x cheaper
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as stream:
            stream.write_table(table)
        blobs.append(sink.getvalue().to_pybytes())
        rows.append([len(t[name]) if name in t else 0 for t in files])
    bundle = pa.table([pa.array(names, pa.string()), pa.array(blobs, pa.binary()),
                       pa.array(rows, pa.list_(pa.int64())),
                       pa.array([_crc(b, r) for b, r in zip(blobs, rows, strict=True)], pa.uint32())],
                      names=list(BUNDLE_COLUMNS))

    def write(tmp: Path) -> None:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, bundle.schema) as writer:
            writer.write_table(bundle)

    return atomic_write(path, write, what="collect part")


def read_bundle(path: Path, names: Iterable[str] | None = None, schema_only: bool = False,
                files: slice = slice(None)) -> dict[str, Any]:
    """The tables `names` (all when None) of the bundle at `path`, by name: Arrow tables of the
    rows of its `files` (a slice of the files it was written from; all by default), or their
    schemas when `schema_only` (the CRC is then not checked). DamagedBundle when the file does
    not read, a table is missing or its CRC differs."""
    import pyarrow as pa

    try:
        reader = pa.ipc.open_file(pa.py_buffer(Path(path).read_bytes()))   # small: read whole, not mapped
        if reader.num_record_batches != 1 or reader.schema.names != list(BUNDLE_COLUMNS):
            raise DamagedBundle(f"{path}: not a collect part")
        bundle = reader.get_batch(0)
        index = {name: i for i, name in enumerate(bundle.column(0).to_pylist())}
        wanted = list(index) if names is None else list(names)
        blobs, crcs = bundle.column(1), bundle.column(3).to_pylist()
        out: dict[str, Any] = {}
        for name in wanted:
            if name not in index:
                raise DamagedBundle(f"{path}: no table {name!r}")
            blob = blobs[index[name]].as_buffer()
            if schema_only:
                out[name] = pa.ipc.open_stream(blob).schema
                continue
            rows = bundle.column(2)[index[name]].as_py()
            if _crc(blob, rows) != crcs[index[name]]:
                raise DamagedBundle(f"{path}: table {name!r} does not match its CRC-32")
            table = pa.ipc.open_stream(blob).read_all()
            if files != slice(None):
                table = table.slice(sum(rows[:files.start or 0]), sum(rows[files]))
            out[name] = table
        return out
    except (OSError, pa.ArrowException) as exc:
        raise DamagedBundle(f"{path}: {str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}") from None


def concat_parts(parts: list[BundleRows], targets: dict[str, Path], row_group: int = 262_144,
                 compact_every: int = 64) -> list[str]:
    """Stream tables of bundles into one Parquet file per table: `parts` are rows of bundles
    (BundleRows: each with the names of the tables wanted there), and `targets` the file of each
    table name. Each bundle is read once for all its tables (one bundle, and per table one row group of at most `row_group`
    rows, in memory at a time); a table's rows are written in the order of the parts, under one
    schema unifying its parts'. The parts of a table waiting for their row group are merged into
    contiguous tables `compact_every` at a time (Compacting: thousands of small Arrow tables cost far
    more memory than their rows). Each bundle is read once when every table's parts have its
    first part's schema (the usual case), else the schemas are read and unified first and the
    bundles read again. Returns the names of `targets` written (those some part holds), in
    their order; DamagedBundle for a part that does not read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = [name for name in targets if any(name in part.tables for part in parts)]

    class Reschema(Exception):
        """A part whose schema differs from its table's first one: unify them all, then write again."""

    def merged(tables: list[pa.Table]) -> pa.Table:
        return pa.concat_tables(tables).combine_chunks()

    def write(tmps: dict[str, Path], unified: dict[str, pa.Schema] | None) -> None:
        schemas = dict(unified or {})
        writers: dict[str, pq.ParquetWriter] = {}
        pending = {name: Compacting(merged, compact_every) for name in names}
        rows = dict.fromkeys(names, 0)
        try:
            for path, held, files in parts:
                wanted = [name for name in held if name in tmps]
                for name, table in (read_bundle(path, wanted, files=files) if wanted else {}).items():
                    own = table.schema
                    if own.metadata:
                        table = table.replace_schema_metadata(None)
                        own = table.schema
                    schema = schemas.setdefault(name, own)
                    if own is not schema and not own.equals(schema):
                        if unified is None:
                            raise Reschema
                        table = conform(table, schema)
                    if name not in writers:
                        writers[name] = pq.ParquetWriter(tmps[name], schema)
                    pending[name].append(table)
                    rows[name] += len(table)
                    if rows[name] >= row_group:
                        writers[name].write_table(pa.concat_tables(pending[name].items()))
                        pending[name], rows[name] = Compacting(merged, compact_every), 0
            for name, waiting in pending.items():
                if tables := waiting.items():
                    writers[name].write_table(pa.concat_tables(tables))
        finally:
            for writer in writers.values():
                writer.close()

    def atomically(tmps: dict[str, Path], unified: dict[str, pa.Schema] | None) -> None:
        """write() into a temporary file per table, each renamed to its target once all are written."""
        if len(tmps) == len(names):
            write(tmps, unified)
            return
        name = names[len(tmps)]
        atomic_write(targets[name], lambda tmp: atomically({**tmps, name: tmp}, unified), what="result table")

    try:
        atomically({}, None)
    except Reschema:
        unified: dict[str, pa.Schema] = {}
        for path, held, _ in parts:  # one running schema per table, not one per part
            wanted = [name for name in held if name in targets]
            for name, other in (read_bundle(path, wanted, schema_only=True) if wanted else {}).items():
                other = other.remove_metadata()
                schema = unified.setdefault(name, other)
                if not other.equals(schema):
                    unified[name] = pa.unify_schemas([schema, other], promote_options="permissive")
        atomically({}, unified)
    return names


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` under `schema`, a schema unifying its own: the columns it lacks as nulls, in the
    schema's order and types."""
    import pyarrow as pa

    for column in schema.names:
        if column not in table.column_names:
            table = table.append_column(column, pa.nulls(len(table), schema.field(column).type))
    return table.select(schema.names).cast(schema)


def piece_row_groups(pieces: list[Path]) -> tuple[pa.Schema, Iterator[pa.Table]]:
    """Parquet files `pieces` (each one slice of a table's rows, in order) under one schema unifying
    theirs: the schema, and their row groups in order, each conformed to it (one read at a time)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schemas = [pq.read_schema(piece).remove_metadata() for piece in pieces]
    schema = schemas[0]
    for other in schemas[1:]:
        if not other.equals(schema):
            schema = pa.unify_schemas([schema, other], promote_options="permissive")

    def row_groups() -> Iterator[pa.Table]:
        for piece, own in zip(pieces, schemas, strict=True):
            source = pq.ParquetFile(piece)
            for i in range(source.num_row_groups):
                table = source.read_row_group(i).replace_schema_metadata(None)
                yield table if own.equals(schema) else conform(table, schema)

    return schema, row_groups()


def read_pieces(pieces: list[Path]) -> pa.Table:
    """Parquet files `pieces` as one Arrow table: the table concat_pieces writes, in memory."""
    import pyarrow as pa

    schema, row_groups = piece_row_groups(pieces)
    tables = [*row_groups]
    return pa.concat_tables(tables) if tables else schema.empty_table()


def concat_pieces(pieces: list[Path], target: Path, row_group: int = 262_144) -> None:
    """Stream Parquet files `pieces` (each one slice of a table's rows, in order) into one
    Parquet file `target` under one schema unifying theirs: one row group of each piece, and at
    most `row_group` rows waiting for theirs, in memory at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema, row_groups = piece_row_groups(pieces)

    def write(tmp: Path) -> None:
        pending: list[pa.Table] = []
        rows = 0
        with pq.ParquetWriter(tmp, schema) as writer:
            for table in row_groups:
                pending.append(table)
                rows += len(table)
                if rows >= row_group:
                    writer.write_table(pa.concat_tables(pending))
                    pending, rows = [], 0
            if pending:
                writer.write_table(pa.concat_tables(pending))

    atomic_write(target, write, what="result table")


def concat_frames(frames: Iterable[pd.DataFrame], compact_every: int = 64) -> pd.DataFrame | None:
    """The frames concatenated in order, merged `compact_every` at a time as they stream in
    (Compacting: thousands of small frames cost far more memory than their rows); empty frames are left out
    unless all are empty (they would change the dtypes). None when there is no frame."""
    import pandas as pd

    def merged(parts: list[pd.DataFrame]) -> pd.DataFrame:
        return pd.concat([f for f in parts if len(f)] or parts[:1], ignore_index=True)

    pending = Compacting(merged, compact_every)
    for frame in frames:
        pending.append(frame)
    frames_left = pending.items()
    return merged(frames_left) if frames_left else None
