"""A columnar cache of an nsys export's column reads, so a second analysis skips the SQLite scan.

Every columnar read of an export goes through `Export.sql_batches(sql)`; with a cache, the Arrow
batches of each SQL text are written (while they stream to the analysis) to an Arrow IPC file in
`.<export name>.hpcprof-cache/` beside the export, and read back memory-mapped the next time.
The cache is keyed by the export's size, mtime, nsys schema version and hpcprof's version
(`key.json`): any change empties it. A damaged or truncated file is dropped and read again from
the export. Beside the column reads, small results computed from them (the `nsys stats` reports'
tables, see stats.run_table; the tables of `hpcprof nsys nccl|overlap|gaps|phases|critical-path`,
see cli._per_file_result, as frame_document) are kept as JSON documents, keyed also by the code that
computed them (code_version), so a second analysis of the same export with the same options reads a
few kB. Only exports of CACHE_MIN_BYTES or more are cached (per-rank exports read faster
than a cache would); HPCPROF_NSYS_CACHE=on caches every export, =off none. Where the export's
directory is not writable there is no cache, and nothing else changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow as pa

CACHE_MIN_BYTES = 64 << 20
FORMAT = 1                                  # bump when what a cached file holds changes


@cache
def code_version() -> str:
    """A digest of what computes a cached result: the export readers and reports (hpcprof/tools/nsys/stats/*.py),
    hpcprof's analyses of exports (hpcprof/tools/nsys/analysis/*.py), the critical-path reduce
    (hpcprof/analysis/critical_path.py), the range reductions (hpcprof/analysis/ranges.py) and the
    rank-of-file rule (hpcprof/run/ranks.py)."""
    here = Path(__file__).parent
    root = here.parents[2]
    digest = hashlib.sha256()
    for module in [*sorted(here.glob("*.py")), *sorted((here.parent / "analysis").glob("*.py")),
                   root / "analysis" / "critical_path.py", root / "analysis" / "ranges.py", root / "run" / "ranks.py"]:
        digest.update(module.name.encode() + b"\0" + module.read_bytes())
    return digest.hexdigest()[:16]


#: the column types a kept frame may hold (frame_document)
FRAME_DTYPES = ("int64", "float64", "bool", "object", "str", "Int64")


def frame_document(df: Any) -> dict[str, Any] | None:
    """A JSON document of a DataFrame of plain columns (FRAME_DTYPES, default index), or None when
    it has others or does not come back equal (frame_from_document): then it is not kept."""
    import pandas as pd

    if not isinstance(df.index, pd.RangeIndex) or df.index.start != 0 or df.index.step != 1 \
            or not all(isinstance(c, str) for c in df.columns) or df.columns.has_duplicates:
        return None
    columns = []
    for name in df.columns:
        column = df[name]
        dtype = str(column.dtype)
        if dtype not in FRAME_DTYPES:
            return None
        values = column.astype(object).where(column.notna(), None).tolist() if dtype == "Int64" else column.tolist()
        columns.append([name, dtype, values])
    document = {"rows": len(df), "columns": columns}
    try:
        back = frame_from_document(json.loads(json.dumps(document)))
    except (TypeError, ValueError):               # a value JSON does not hold (e.g. a numpy scalar in an object column)
        return None
    return document if back.equals(df) and list(back.dtypes) == list(df.dtypes) else None


def frame_from_document(document: dict[str, Any]) -> Any:
    """The DataFrame of a frame_document."""
    import numpy as np
    import pandas as pd

    rows = int(document["rows"])
    data = {}
    for name, dtype, values in document["columns"]:
        if len(values) != rows or dtype not in FRAME_DTYPES:
            raise ValueError(f"column {name!r}: {len(values)} values of {dtype}, not {rows}")
        if dtype == "object":
            column = np.empty(rows, dtype=object)
            column[:] = values
            data[name] = pd.Series(column, dtype=object)
        else:
            data[name] = pd.Series(values, dtype=dtype)
    return pd.DataFrame(data, columns=[c[0] for c in document["columns"]])


def cache_dir(export: Path) -> Path:
    """Where the cache of `export` lives."""
    return export.parent / f".{export.name}.hpcprof-cache"


def wanted(export: Path) -> bool:
    """Whether `export` is cached (HPCPROF_NSYS_CACHE, else its size)."""
    setting = os.environ.get("HPCPROF_NSYS_CACHE", "").strip().lower()
    if setting in ("off", "0", "no"):
        return False
    return setting in ("on", "1", "yes") or export.stat().st_size >= CACHE_MIN_BYTES


class QueryCache:
    """Cached Arrow results of one export's column reads, by SQL text."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @classmethod
    def open(cls, export: Path, schema: str) -> QueryCache | None:
        """The cache of `export` (emptied when its key changed), or None when not wanted or not writable."""
        from hpcprof import __version__

        try:
            if not wanted(export):
                return None
            st = export.stat()
            key = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "schema": schema, "hpcprof": __version__,
                   "format": FORMAT}
            directory = cache_dir(export)
            try:
                same = json.loads((directory / "key.json").read_text()) == key
            except (OSError, ValueError):
                same = False
            if not same:
                shutil.rmtree(directory, ignore_errors=True)
                directory.mkdir(exist_ok=True)
                tmp = directory / f".key.{os.getpid()}.{uuid.uuid4().hex[:8]}"
                tmp.write_text(json.dumps(key, sort_keys=True))
                os.replace(tmp, directory / "key.json")
            return cls(directory)
        except OSError:
            return None

    def _result_file(self, name: str) -> Path:
        return self.directory / ("result-" + hashlib.sha256(f"{code_version()}\0{name}".encode()).hexdigest()[:32]
                                 + ".json")

    def read_result(self, name: str) -> Any | None:
        """The JSON document kept as result `name` by this code (None: not kept, or damaged: then dropped)."""
        path = self._result_file(name)
        try:
            document = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
            return None
        if not isinstance(document, dict) or document.get("name") != name:
            path.unlink(missing_ok=True)
            return None
        return document.get("value")

    def write_result(self, name: str, value: Any) -> None:
        """Keep `value` (JSON) as result `name`; written whole or not at all (no cache where that fails)."""
        path = self._result_file(name)
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            tmp.write_text(json.dumps({"name": name, "value": value}))
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)

    def _file(self, sql: str) -> Path:
        return self.directory / (hashlib.sha256(sql.encode()).hexdigest()[:32] + ".arrow")

    def read(self, sql: str) -> list[pa.RecordBatch] | None:
        """The cached batches of `sql` (memory-mapped), or None: not cached, or damaged (then dropped)."""
        path = self._file(sql)
        if not path.exists():
            return None
        try:
            with pa.ipc.open_file(pa.memory_map(str(path))) as reader:
                if reader.schema.metadata is None or reader.schema.metadata.get(b"sql") != sql.encode():
                    raise ValueError("another query's file")
                return [reader.get_batch(i) for i in range(reader.num_record_batches)]
        except (OSError, ValueError, pa.ArrowException):
            path.unlink(missing_ok=True)
            return None

    def write_through(self, sql: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """`batches`, each also written to the cache; the file appears only when all were read."""
        path = self._file(sql)
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        writer = None
        done = False
        try:
            for batch in batches:
                if writer is None:
                    writer = self._writer(tmp, batch.schema, sql)
                if writer is not None:
                    try:
                        writer.write_batch(batch)
                    except (OSError, pa.ArrowException):     # e.g. a full disk: no cache of this read
                        writer.close()
                        writer = None
                yield batch
            done = True
        finally:
            if writer is not None:
                try:
                    writer.close()
                    if done:
                        os.replace(tmp, path)
                except (OSError, pa.ArrowException):      # the cache went away meanwhile: no cache of this read
                    pass
            tmp.unlink(missing_ok=True)

    @staticmethod
    def _writer(tmp: Path, schema: pa.Schema, sql: str) -> pa.ipc.RecordBatchFileWriter | None:
        """A file writer for the cache (None when the cache cannot be written: then no cache)."""
        try:
            return pa.ipc.new_file(str(tmp), schema.with_metadata({"sql": sql}))
        except (OSError, pa.ArrowException):
            return None
