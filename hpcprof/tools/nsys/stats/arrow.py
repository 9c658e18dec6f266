"""The Arrow side of the export reads (db.py): the ADBC SQLite connection record batches come
from, the numpy views of their integer columns and back, the batch a small read's rows make, and
text columns as integer codes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import adbc_driver_manager
import adbc_driver_sqlite
import numpy as np
import pyarrow as pa

#: every connection reads the export memory-mapped (SQLite caps it at 2 GB): a scan then costs no
#: read() call per page (a 4.2 M-row CUDA API read: 0.64-0.72 -> 0.56-0.60 s, system time 0.09 -> 0.02 s)
MMAP_PRAGMA = f"PRAGMA mmap_size = {1 << 40}"


#: Arrow types read as numpy views of their value buffer
NUMPY_TYPES = {pa.int64(): np.int64, pa.int32(): np.int32, pa.int16(): np.int16, pa.int8(): np.int8,
               pa.uint32(): np.uint32, pa.float64(): np.float64}
ARROW_TYPES = {np.dtype(v): k for k, v in NUMPY_TYPES.items()}


def numpy_of(array: pa.Array) -> np.ndarray:
    """A numpy view of a null-free integer/float Arrow array's values. (pyarrow's `to_numpy`
    and `pa.array` import pandas, 0.2-0.5 s a CSV report never needs; other arrays still
    take that path.)"""
    dtype = NUMPY_TYPES.get(array.type)
    if dtype is None or array.null_count:
        return array.to_numpy(zero_copy_only=False)
    size = np.dtype(dtype).itemsize
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * size)


def arrow_of(values: np.ndarray) -> pa.Array:
    """An Arrow array viewing a 1-d numpy integer/float array (object arrays: `pa.array`)."""
    values = np.ascontiguousarray(values)
    if values.dtype not in ARROW_TYPES:
        return pa.array(values, from_pandas=True)
    return pa.Array.from_buffers(ARROW_TYPES[values.dtype], len(values), [None, pa.py_buffer(values)])


def text_array(values: Sequence[str]) -> pa.Array:
    """An Arrow string array of Python strings, built from its buffers (`pa.array` imports pandas):
    encoded at once, the offsets from their lengths (each encoded only where some are not ASCII)."""
    data = (text := "".join(values)).encode()
    parts = values if len(data) == len(text) else [v.encode() for v in values]
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, parts), dtype=np.int64, count=len(values)), out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(values), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def small_batch(rows: list[tuple]) -> pa.RecordBatch | None:
    """Rows read through sqlite3 as one Arrow batch of the types ADBC gives them: integer and
    float columns through numpy, text columns from their UTF-8 bytes; None when a column holds
    anything else (NULLs, mixed types), for the caller to read it through ADBC instead."""
    arrays = []
    for column in zip(*rows, strict=True):
        if type(column[0]) is str and all(type(v) is str for v in column):
            arrays.append(text_array(column))
            continue
        values = np.array(column)
        if values.dtype.kind not in "if":
            return None
        arrays.append(arrow_of(values))
    return pa.RecordBatch.from_arrays(arrays, names=[str(i) for i in range(len(arrays))])


class TextCodes:
    """Integer codes for the strings of Arrow text columns, shared across batches (NUL = NULL)."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}

    def encode(self, column: pa.Array) -> np.ndarray:
        """Code of each value of `column` (dictionary-encoded in C; only distinct values touch Python)."""
        encoded = column.cast(pa.string()).dictionary_encode()
        local = np.array([self._codes.setdefault(v, len(self._codes)) for v in encoded.dictionary.to_pylist()],
                         dtype=np.int64)
        return local[numpy_of(encoded.indices)] if len(local) else np.empty(0, dtype=np.int64)

    def values(self) -> np.ndarray:
        """The distinct values in code order (None for NULL)."""
        values = np.array(list(self._codes) + [None], dtype=object)[:-1]
        values[values == "\x00"] = None
        return values


class ArrowConnection:
    """An ADBC SQLite connection used through the driver manager's own API: its DB-API module
    imports pyarrow.dataset and with it pandas, 0.2-0.5 s that a CSV report never needs."""

    def __init__(self, uri: str) -> None:
        self._database = adbc_driver_sqlite.connect(uri)
        self._connection = adbc_driver_manager.AdbcConnection(self._database)
        self._open: dict[int, tuple[adbc_driver_manager.AdbcStatement, pa.RecordBatchReader | None]] = {}
        list(self.batches(MMAP_PRAGMA))

    def batches(self, sql: str, batch_rows: int = 1 << 16) -> Iterator[pa.RecordBatch]:
        """The record batches of `sql`, up to `batch_rows` rows each."""
        statement = adbc_driver_manager.AdbcStatement(self._connection)
        self._open[id(statement)] = (statement, None)
        try:
            statement.set_options(**{"adbc.sqlite.query.batch_rows": str(batch_rows)})
            statement.set_sql_query(sql)
            stream, _ = statement.execute_query()
            reader = pa.RecordBatchReader.from_stream(stream)
            self._open[id(statement)] = (statement, reader)
            yield from reader
        finally:
            self._finish(id(statement))

    def _finish(self, key: int) -> None:
        """Close one statement (its stream first), if still open."""
        statement, reader = self._open.pop(key, (None, None))
        if reader is not None:
            reader.close()
        if statement is not None:
            statement.close()

    def close(self) -> None:
        """Close the connection, and first every statement whose reading was left unfinished (a
        caller that failed mid-read: else closing the connection fails and hides that error)."""
        for key in list(self._open):
            self._finish(key)
        self._connection.close()
        self._database.close()
