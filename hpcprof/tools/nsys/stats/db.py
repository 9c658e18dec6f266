"""Open an Nsight Systems SQLite export read-only and read its tables as columns.

Columns are read by the ADBC SQLite driver into Arrow record batches (no per-row Python
objects); a table of at most SMALL_READ_ROWS rows (a per-rank export's) through the sqlite3
connection instead, into the same batches (`Export.sql_batches`). SQL is either plain text
(the summary reports, which pack several integers into one column in SQL: the driver's cost
is per value moved, SQLite's arithmetic is nearly free) or built with SQLAlchemy Core against
the reflected tables; SQLAlchemy is imported on first use only, so the summary reports never
pay for it. The user's file is opened with `mode=ro&immutable=1`, so SQLite never writes to it or next to it.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import adbc_driver_manager
import numpy as np
import pyarrow as pa

from hpcprof.core.cpus import usable_cpus
from hpcprof.tools.nsys.stats.arrow import MMAP_PRAGMA, ArrowConnection, numpy_of, small_batch
from hpcprof.tools.nsys.stats.cache import QueryCache, wanted
from hpcprof.tools.nsys.stats.schema import (  # noqa: F401  (re-exported: the analyses import them from here)
    GPU_TABLES,
    KERNEL,
    MEMCPY,
    MEMSET,
    NO_GPU_ACTIVITY,
    NO_STRINGS,
    NVTX,
    NVTX_DOMAIN_CREATE,
    NVTX_PUSHPOP,
    NVTX_STARTEND,
    OSRT,
    RUNTIME,
    STRINGS,
    NsysInputError,
    check_sqlite_file,
)

if TYPE_CHECKING:
    import pandas as pd
    import sqlalchemy as sa
    from sqlalchemy.engine import Connection, Engine

BATCH_ROWS = 1 << 16          # rows per Arrow batch read from SQLite
SPLIT_ROWS = 1 << 17          # tables larger than this are read in parallel rowid parts ...
MIN_PARTS = 2                 # ... at least this many, else one per CPU the export may use, each of SPLIT_ROWS rows or more
SMALL_READ_ROWS = 1 << 12     # tables up to this many rows are read through sqlite3 (sql_batches)
#: the tables whose rowid spans (Export.size) are looked up together: those collect's analyses read
SIZED_TABLES = (KERNEL, MEMCPY, MEMSET, RUNTIME, NVTX, OSRT)
STRINGS_KEPT = 1 << 14        # StringIds values an export keeps once looked up, at most
T = TypeVar("T")


#: a serialized globalPid/globalTid's process id: its bits 24-47
PID_BITS, PID_MASK = 24, 0xFFFFFF


def pid_of(global_id: np.ndarray | pd.Series) -> np.ndarray:
    """Process id from a serialized globalPid/globalTid."""
    return (np.asarray(global_id, dtype=np.int64) >> PID_BITS) & PID_MASK


def tid_of(global_tid: np.ndarray | pd.Series) -> np.ndarray:
    """Thread id from a serialized globalTid."""
    return np.asarray(global_tid, dtype=np.int64) & 0xFFFFFF


def process_of(global_tid: np.ndarray | pd.Series) -> np.ndarray:
    """The globalPid of the process a globalTid belongs to (tid bits zeroed)."""
    return np.asarray(global_tid, dtype=np.int64) & ~np.int64(0xFFFFFF)


def _affinity(declared: str) -> sa.types.TypeEngine:
    """The SQLAlchemy type of a column declared `declared`, by SQLite's type-affinity rules."""
    import sqlalchemy as sa

    upper = declared.upper()
    if "INT" in upper:
        return sa.Integer()
    if any(t in upper for t in ("CHAR", "CLOB", "TEXT")):
        return sa.Text()
    if not upper or "BLOB" in upper:
        return sa.LargeBinary()
    if any(t in upper for t in ("REAL", "FLOA", "DOUB")):
        return sa.Float()
    return sa.Numeric()


class Export:
    """One nsys SQLite export, opened read-only, with the tables it actually has."""

    def __init__(self, path: str | os.PathLike[str], cpus: int | None = None) -> None:
        self.path = Path(path)
        #: the CPUs its large tables are read on (_parts): `cpus`, else those this process may use
        self.cpus = cpus or usable_cpus()
        check_sqlite_file(self.path)
        self._uri = "file:" + urllib.parse.quote(os.path.abspath(self.path)) + "?mode=ro&immutable=1"
        self._lock = threading.RLock()          # the sqlite3 connection is shared by report threads
        self._local = threading.local()         # one ADBC connection per thread
        self._arrow_conns: list[ArrowConnection] = []
        self._engine: Engine | None = None
        self._conn: Connection | None = None
        self._meta: sa.MetaData | None = None
        self._columns: dict[str, set[str]] = {}
        self._memo: dict[str, object] = {}
        self._memo_locks: dict[str, threading.Lock] = {}
        #: StringIds values looked up (None: no such id), shared by the analyses of the export
        self.known_strings: dict[int, str | None] = {}
        self._dbapi: sqlite3.Connection | None = None
        try:
            self._dbapi = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
            self._dbapi.execute(MMAP_PRAGMA)
            self.table_names: set[str] = {r[0] for r in self._dbapi.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as exc:
            self.close()
            raise NsysInputError(f"{self.path}: unreadable SQLite file ({exc})") from None

    @property
    def engine(self) -> Engine:
        """A SQLAlchemy engine on the same read-only connection (created on first use)."""
        with self._lock:
            if self._engine is None:
                import sqlalchemy as sa

                self._engine = sa.create_engine("sqlite://", poolclass=sa.pool.StaticPool,
                                                creator=lambda: self._dbapi)
                self._meta = sa.MetaData()
                self._conn = self._engine.connect()
            return self._engine

    @property
    def _db(self) -> sqlite3.Connection:
        """The open sqlite3 connection."""
        if self._dbapi is None:
            raise NsysInputError(f"{self.path}: the export is closed")
        return self._dbapi

    def close(self) -> None:
        """Release the connections."""
        while self._arrow_conns:
            self._arrow_conns.pop().close()
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
        if self._dbapi is not None:
            self._dbapi.close()
            self._dbapi = None

    def __enter__(self) -> Export:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema ---------------------------------------------------------------------------

    def has(self, table: str) -> bool:
        """Whether the export has `table`."""
        return table in self.table_names

    def table(self, name: str) -> sa.Table:
        """Table `name` as SQLAlchemy Core sees it: its columns and their SQLite type affinity, from
        one PRAGMA (built on first use; full reflection costs ~1 ms a table, more than its read)."""
        import sqlalchemy as sa

        self.engine                             # noqa: B018 (creates the engine, metadata, connection)
        with self._lock:
            meta = self._meta
            assert meta is not None
            if name not in meta.tables:
                info = self._table_info(name)
                if not info:
                    raise NsysInputError(f"{self.path}: cannot read table {name} (no such table)")
                sa.Table(name, meta, *[sa.Column(col, _affinity(declared), primary_key=bool(pk))
                                       for col, declared, pk in info])
            return meta.tables[name]

    def _table_info(self, name: str) -> list[tuple[str, str, int]]:
        """(column, declared type, primary-key position) of each column of `name` (empty when missing)."""
        quoted = name.replace('"', '""')
        try:
            with self._lock:
                rows = self._db.execute(f'PRAGMA table_info("{quoted}")').fetchall()
        except sqlite3.DatabaseError as exc:
            raise NsysInputError(f"{self.path}: cannot read table {name} ({exc})") from None
        return [(str(r[1]), str(r[2] or ""), int(r[5] or 0)) for r in rows]

    def columns(self, name: str) -> set[str]:
        """Column names of `name` (empty when the table is missing): those of a select of no rows
        (2 us, where PRAGMA table_info takes 17)."""
        if not self.has(name):
            return set()
        quoted = name.replace('"', '""')
        with self._lock:
            if name not in self._columns:
                try:
                    cursor = self._db.execute(f'SELECT * FROM "{quoted}" LIMIT 0')
                except sqlite3.DatabaseError as exc:
                    raise NsysInputError(f"{self.path}: cannot read table {name} ({exc})") from None
                self._columns[name] = {str(column[0]) for column in cursor.description}
            return set(self._columns[name])

    @cached_property
    def metadata(self) -> dict[str, str]:
        """META_DATA_EXPORT as a dict (empty when absent)."""
        if not self.has("META_DATA_EXPORT"):
            return {}
        return {str(k): str(v) for k, v in self.sql_rows("SELECT name, value FROM META_DATA_EXPORT")}

    @property
    def version(self) -> str:
        """The nsys version that wrote the export, e.g. '2025.3.2.0' ('' when unknown)."""
        return self.metadata.get("EXPORT_PRODUCT_VERSION", "")

    @property
    def schema_version(self) -> tuple[int, ...]:
        """EXPORT_SCHEMA_VERSION as a tuple, e.g. (3, 20, 3)."""
        raw = self.metadata.get("EXPORT_SCHEMA_VERSION", "")
        return tuple(int(p) for p in raw.split(".") if p.isdigit())

    def size(self, table: str) -> int:
        """Rows of `table`, roughly (the rowid span; 0 when the table is missing or empty)."""
        lo, hi = self._rowids(table)
        return 0 if lo is None or hi is None else hi - lo + 1

    def _rowids(self, table: str) -> tuple[int | None, int | None]:
        """(min, max) rowid of `table` (two index look-ups); (None, None) when empty, missing or
        a WITHOUT ROWID table; looked up once per export (opened immutable: it does not change),
        with those of the other SIZED_TABLES it has, in one query."""
        key = f"rowids {table}"
        if not self.memoized(key) and self.has(table):
            together = [t for t in dict.fromkeys((table, *SIZED_TABLES))
                        if self.has(t) and not self.memoized(f"rowids {t}")]
            spans = self._rowid_spans(together)
            with self._lock:
                for name, span in zip(together, spans, strict=True):
                    self._memo.setdefault(f"rowids {name}", span)
        return self.memo(key, lambda: (None, None))  # type: ignore[no-any-return]

    def _rowid_spans(self, tables: list[str]) -> list[tuple[int | None, int | None]]:
        """(min, max) rowid of each of `tables` (present), in one query; each on its own where
        that fails ((None, None) for one that fails alone)."""
        sql = ", ".join(f'(SELECT min(rowid) FROM "{t}"), (SELECT max(rowid) FROM "{t}")' for t in tables)
        try:
            with self._lock:
                row = self._db.execute(f"SELECT {sql}").fetchone()
            return [(row[2 * i], row[2 * i + 1]) for i in range(len(tables))]
        except sqlite3.DatabaseError:
            if len(tables) == 1:
                return [(None, None)]
            return [span for t in tables for span in self._rowid_spans([t])]

    def has_rows(self, table: str) -> bool:
        """Whether `table` exists and has at least one row."""
        if not self.has(table):
            return False
        return self._rowids(table)[0] is not None or bool(self.sql_rows(f'SELECT 1 FROM "{table}" LIMIT 1'))

    def check_usable(self, gpu: bool = True) -> None:
        """Raise NsysInputError when the export has no StringIds table or (with `gpu`) no kernel,
        memcpy or memset rows. `nsys stats` asks for no GPU rows: each report names what it lacks."""
        if not self.has(STRINGS):
            raise NsysInputError(f"{self.path}: {NO_STRINGS}")
        if gpu and not any(self.has_rows(t) for t in GPU_TABLES):
            raise NsysInputError(f"{self.path}: {NO_GPU_ACTIVITY}")

    # -- reading --------------------------------------------------------------------------

    def memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """`compute()` once per export (thread-safe): reports that share a table read it once."""
        if key in self._memo:                   # computed: no lock needed to read it
            return self._memo[key]
        with self._lock:
            lock = self._memo_locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._memo:
                self._memo[key] = compute()
            return self._memo[key]

    def memoized(self, key: str) -> bool:
        """Whether memo(`key`, ...) has been computed."""
        return key in self._memo

    def rows(self, stmt: sa.Select) -> list[tuple]:
        """Run a Core select on the driver cursor; all rows as tuples."""
        return self.sql_rows(str(stmt.compile(self.engine, compile_kwargs={"literal_binds": True})))

    def sql_rows(self, sql: str, params: Sequence[object] = ()) -> list[tuple]:
        """Run SQL text (its `?` bound to `params`) on the sqlite3 connection; all rows as tuples
        (small results only)."""
        try:
            with self._lock:
                return self._db.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise NsysInputError(f"{self.path}: SQLite error ({exc})") from None

    def batches(self, stmt: sa.Select, text: tuple[int, ...] = ()) -> Iterator[pa.RecordBatch]:
        """Run a Core select through ADBC; Arrow record batches of up to BATCH_ROWS rows.

        Columns whose positions are in `text` come back as strings with NULL as "\\x00"
        (see TextCodes); the others must be integers, NULL as -1."""
        import sqlalchemy as sa

        stmt = stmt.with_only_columns(*(
            sa.func.coalesce(c, sa.func.char(0) if i in text else -1).label(c.name)
            for i, c in enumerate(stmt.selected_columns)))
        yield from self.sql_batches(str(stmt.compile(self.engine, compile_kwargs={"literal_binds": True})))

    def sql_ints(self, columns: str, table: str, where: str = "", ncols: int = 1) -> list[np.ndarray]:
        """`SELECT columns FROM table WHERE where` of `ncols` integer columns (never NULL, the SQL
        coalesces); one int64 array per column, in table order (read by map_batches; a small
        read's rows straight into one int64 array, see small_rows)."""
        rows = self.small_rows(f'SELECT {columns} FROM "{table}"' + (f" WHERE ({where})" if where else ""), table)
        if rows is not None:                    # else, and where a value is not a number, as ADBC types them
            try:
                values = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=len(rows) * ncols)
                return list(values.reshape(len(rows), ncols).T.copy())
            except (TypeError, ValueError, OverflowError):
                pass

        def fill(batch: pa.RecordBatch, views: list[np.ndarray]) -> bool:
            try:
                for i, view in enumerate(views):
                    view[:] = numpy_of(batch.column(i))
            except (TypeError, ValueError, OverflowError) as exc:     # text where nsys writes integers
                raise NsysInputError(f"{self.path}: {table} holds values that are not integers ({exc}): the "
                                     "export is damaged") from None
            return True

        return cast(list[np.ndarray], self.read_into(columns, table, where, [np.int64] * ncols, fill))

    def int_columns(self, table: str, columns: Sequence[str] | Mapping[str, str], where: str = "") -> dict[str, np.ndarray]:
        """Integer columns of `table` (names, or {name: SQL expression}) as int64 arrays by name,
        NULL as -1: plain SQL through sql_ints, no SQLAlchemy statement to build and compile
        (which costs a per-rank export's report more than its read)."""
        exprs = dict(columns) if isinstance(columns, Mapping) else {c: f'"{c}"' for c in columns}
        sql = ", ".join(f"coalesce({e}, -1)" for e in exprs.values())
        return dict(zip(exprs, self.sql_ints(sql, table, where, len(exprs)), strict=True))

    def _parts(self, table: str) -> list[tuple[int, int] | None]:
        """The rowid ranges map_batches reads `table` in: for a table of more than SPLIT_ROWS rows,
        one per CPU of `self.cpus`, as many as give each SPLIT_ROWS rows, and MIN_PARTS at least
        (on a 16-CPU H200 host `nsys stats` of benchmarks/read_parts.py's four shapes ran 1.4-1.6x
        faster than in 2 parts, the same bytes); else one (None: the whole table)."""
        lo, hi = self._rowids(table)
        if lo is None or hi is None or hi - lo + 1 <= SPLIT_ROWS:
            return [None]
        parts = max(MIN_PARTS, min(self.cpus, (hi - lo + 1) // SPLIT_ROWS))
        step = (hi - lo + parts) // parts
        return [(a, min(a + step - 1, hi)) for a in range(lo, hi + 1, step)]

    def _part_batches(self, columns: str, table: str, where: str, rowids: tuple[int, int] | None,
                      ) -> Iterator[pa.RecordBatch]:
        """The record batches of `SELECT columns FROM table WHERE where` within `rowids` (a part)."""
        conds = [f"rowid BETWEEN {rowids[0]} AND {rowids[1]}"] if rowids else []
        conds += [f"({where})"] if where else []
        return self.sql_batches(f'SELECT {columns} FROM "{table}"' + (" WHERE " + " AND ".join(conds) if conds
                                                                           else ""), table)

    def map_batches(self, columns: str, table: str, where: str, fn: Callable[[pa.RecordBatch], T]) -> list[T]:
        """`fn` of each record batch of `SELECT columns FROM table WHERE where`, in table order.

        A table of more than SPLIT_ROWS rows is read as rowid ranges (_parts) in parallel
        threads, each on its own ADBC connection (the driver and numpy release the GIL)."""
        def run(rowids: tuple[int, int] | None) -> list[T]:
            return [fn(batch) for batch in self._part_batches(columns, table, where, rowids)]

        ranges = self._parts(table)
        if len(ranges) == 1:
            return run(ranges[0])
        with ThreadPoolExecutor(len(ranges)) as pool:
            return [r for part in pool.map(run, ranges) for r in part]

    def read_into(self, columns: str, table: str, where: str, dtypes: Sequence[type],
                  fill: Callable[[pa.RecordBatch, list[np.ndarray]], bool]) -> list[np.ndarray] | None:
        """The rows of `SELECT columns FROM table WHERE where` as one array per `dtypes` entry, in
        table order, read as map_batches reads them: `fill(batch, views)` writes a batch's values
        into the arrays' rows for it (False: it cannot, and None is returned). The arrays are made
        once, as long as the table's rowid span, zeroed by the OS as their pages are first written;
        each part fills them from its first rowid's row on, and a part that read fewer rows than
        its span (a `where`, rowid gaps) has the rows after it moved up. No batch outlives its
        fill, nothing is concatenated: 1.48 M memcpys' 4 columns leave 21 k -> 11 k pages touched.
        A table whose rowid span is longer than the file has bytes goes through map_batches."""
        lo, hi = self._rowids(table)
        if lo is None or hi is None or hi - lo + 1 > os.path.getsize(self.path):
            parts = self.map_batches(columns, table, where, lambda b: self._filled(b, dtypes, fill))
            return None if any(p is None for p in parts) else [
                np.concatenate([p[i] for p in parts]) if parts else np.empty(0, dtype=t)  # type: ignore[index]
                for i, t in enumerate(dtypes)]
        out: list[np.ndarray] = [np.zeros(hi - lo + 1, dtype=t) for t in dtypes]

        def run(rowids: tuple[int, int] | None) -> int | None:
            at = start = 0 if rowids is None else rowids[0] - lo
            for batch in self._part_batches(columns, table, where, rowids):
                if not fill(batch, [a[at:at + len(batch)] for a in out]):
                    return None
                at += len(batch)
            return at - start

        ranges = self._parts(table)
        if len(ranges) == 1:
            counts = [run(ranges[0])]
        else:
            with ThreadPoolExecutor(len(ranges)) as pool:
                counts = list(pool.map(run, ranges))
        known = [n for n in counts if n is not None]
        if len(known) < len(counts):
            return None
        end = 0
        for rowids, n in zip(ranges, known, strict=True):
            start = 0 if rowids is None else rowids[0] - lo
            if start != end:
                for a in out:
                    a[end:end + n] = a[start:start + n].copy()
            end += n
        return [a[:end] for a in out]

    @staticmethod
    def _filled(batch: pa.RecordBatch, dtypes: Sequence[type],
                fill: Callable[[pa.RecordBatch, list[np.ndarray]], bool]) -> list[np.ndarray] | None:
        """read_into's arrays of one batch alone (None: `fill` cannot)."""
        views: list[np.ndarray] = [np.zeros(len(batch), dtype=t) for t in dtypes]
        return views if fill(batch, views) else None

    def sql_batches(self, sql: str, table: str | None = None) -> Iterator[pa.RecordBatch]:
        """Run SQL text through ADBC; Arrow record batches of up to BATCH_ROWS rows (from the
        export's columnar cache when it has them, see cache.py). A read of `table` (the table
        the SQL reads) of at most SMALL_READ_ROWS rows, as per-rank exports' are, goes through
        the export's sqlite3 connection instead, as one batch: an ADBC connection and statement
        cost more than such a read (see small_batch; a read it cannot type goes through ADBC)."""
        cache = self._cache
        rows = self.small_rows(sql, table) if table is not None else None
        if rows == []:
            return
        batch = self.memo(f"batch {sql}", lambda: small_batch(rows)) if rows else None    # kept, as the rows are
        if batch is not None:
            yield batch
            return
        cached = cache.read(sql) if cache is not None else None
        if cached is not None:
            yield from cached
            return
        try:
            batches = self._arrow.batches(sql, BATCH_ROWS)
            yield from (cache.write_through(sql, batches) if cache is not None else batches)
        except adbc_driver_manager.Error as exc:
            raise NsysInputError(f"{self.path}: SQLite error ({exc})") from None

    def small(self, table: str) -> bool:
        """Whether reads of `table` go through small_rows: at most SMALL_READ_ROWS rows, no columnar cache."""
        return self._cache is None and self.size(table) <= SMALL_READ_ROWS

    def small_rows(self, sql: str, table: str) -> list[tuple] | None:
        """The rows of `sql`, a read of `table`, through the export's sqlite3 connection where the
        table has at most SMALL_READ_ROWS rows and the export no columnar cache (an ADBC connection
        and statement cost more than such a read, as per-rank exports' are); else, or where
        SQLite fails (ADBC's error then names the problem), None. Kept: the analyses that read the
        same columns (collect's activity, window and summaries) read them once."""
        if not self.small(table):
            return None

        def read() -> list[tuple] | None:
            try:
                with self._lock:
                    return self._db.execute(sql).fetchall()
            except sqlite3.Error:
                return None

        return self.memo(f"rows {sql}", read)           # type: ignore[no-any-return]

    def cached_result(self, name: str, compute: Callable[[], T], encode: Callable[[T], Any],
                      decode: Callable[[Any], T]) -> T:
        """`compute()`, or its result kept in the export's cache (cache.py) as `name`, by this code:
        a small result of large reads (`encode` gives its JSON document, or None: not kept;
        `decode` takes it back)."""
        cache = self._cache
        kept = cache.read_result(name) if cache is not None else None
        if kept is not None:
            try:
                return decode(kept)
            except (KeyError, TypeError, ValueError):   # another layout of the document: computed again
                pass
        result = compute()
        document = encode(result) if cache is not None else None
        if cache is not None and document is not None:
            cache.write_result(name, document)
        return result

    @property
    def _cache(self) -> QueryCache | None:
        """The export's columnar cache (None for small exports, see cache.py); opened once, by one thread."""
        def open_cache() -> QueryCache | None:
            try:
                if not wanted(self.path):          # before the metadata read: most exports are not cached
                    return None
            except OSError:
                return None
            try:
                schema = f"{self.metadata.get('EXPORT_SCHEMA_VERSION', '')}/{self.version}"
            except NsysInputError:       # a damaged export: not cached; its reads say what is wrong
                return None
            return QueryCache.open(self.path, schema)

        return self.memo("query_cache", open_cache)          # type: ignore[return-value]

    @property
    def _arrow(self) -> ArrowConnection:
        """This thread's columnar (ADBC) read-only connection to the same file."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = ArrowConnection(self._uri)
            with self._lock:
                self._arrow_conns.append(conn)
        return conn

    def strings(self, ids: np.ndarray) -> np.ndarray:
        """StringIds.value for each id in `ids` (object array; None for unknown ids)."""
        ids = np.asarray(ids, dtype=np.int64)
        uniq, inverse = np.unique(ids, return_inverse=True)
        if not self.has(STRINGS):
            raise NsysInputError(f"{self.path}: {NO_STRINGS}")
        known = self.known_strings              # ids looked up before (the analyses share names)
        wanted = [i for i in uniq.tolist() if i not in known]
        lookup: dict[int, str | None] = {}
        for at in range(0, len(wanted), 50_000):
            part = wanted[at:at + 50_000]
            found = dict(self.sql_rows(f"SELECT id, value FROM {STRINGS} WHERE id IN ({','.join(map(str, part))})"))
            lookup.update((i, found.get(i)) for i in part)
        values = np.array([lookup[i] if i in lookup else known[i] for i in uniq.tolist()] + [None], dtype=object)[:-1]
        if len(known) + len(lookup) <= STRINGS_KEPT:
            with self._lock:
                known.update(lookup)
        return values[inverse]

