"""Per-run result tables: one Parquet file per table at `<run_dir>/results/<table>.parquet`.

Table names are those `collect` gives (`nsys_cuda_gpu_kern_sum`, `workload_seqpar.phases`,
`torch_temporal`, ...). Writes are atomic (hpcprof.core.atomic), so readers never see half a table
and concurrent writers never share a temporary file. A name is a single
path component: anything that could leave `results/` is refused.

Beside the tables, `results/headline.json`: the run's headline metrics and top kernels as collect
computed them from those tables (hpcprof.analysis.summary), so that `report` shows them without
pandas or pyarrow.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from hpcprof.core.atomic import atomic_write
from hpcprof.core.errors import UserError
from hpcprof.core.safe_paths import read_regular

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

SUFFIX = ".parquet"
#: letters, digits, `_ . -`; no leading dot (no `..`, no hidden files), at most 200 characters
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,199}")


class ResultError(UserError, ValueError):
    """A result table that cannot be written or read (bad name, damaged file): one line, exit 2."""


#: a headline metric: (name, value, unit), e.g. ("iteration.mean", 12.5, "ms")
Metric = tuple[str, float, str]
#: a kernel with the most GPU time: (name, GPU time in ms per rank, category), e.g. (..., 24.6, "gemm")
TopKernel = tuple[str, float, str]
HEADLINE = "headline.json"


class Headline(NamedTuple):
    """A collected run's headline metrics and the kernels with the most GPU time (most first)."""

    metrics: list[Metric]
    top_kernels_per_rank: list[TopKernel]   # (a note of hpcprof 0.1 kept `top_kernels`, over all ranks: read as none)


def results_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "results"


def check_name(name: str) -> str:
    """`name` if it is a safe table name, else ResultError (never a path outside results/)."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or ".." in name:
        raise ResultError(f"result table name {name!r}: use letters, digits, '_', '.', '-' "
                          "(one path component, no '..')")
    return name


def table_path(run_dir: Path, name: str) -> Path:
    return results_dir(run_dir) / f"{check_name(name)}{SUFFIX}"


def _as_text(values: Any) -> Any:
    """A mixed-type object column (e.g. ints and strings) as text (a column array); others as they are."""
    if values.dtype == object and len({type(v) for v in values if v is not None and v == v}) > 1:
        import pandas as pd

        return pd.Series(values, copy=False).map(lambda v: None if v is None or v != v else str(v)).array
    return values


def to_arrow(df: pd.DataFrame, pandas_metadata: bool = True) -> pa.Table:
    """`df` as the Arrow table its result file holds: column names as text, mixed-type object
    columns as text, no index. Without `pandas_metadata` (the pandas dtypes to restore on
    reading) each column array is converted on its own, as pyarrow's from_pandas converts it,
    without from_pandas's per-column bookkeeping or a Series per column (several times faster
    on small frames)."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    names = [str(c) for c in df.columns]
    if pandas_metadata:
        frame = df.copy(deep=False)
        frame.attrs = {}
        frame.columns = names
        for i in range(frame.shape[1]):
            if frame.dtypes.iloc[i] == object:
                frame.isetitem(i, _as_text(frame.iloc[:, i]))
        return pa.Table.from_pandas(frame, preserve_index=False)
    arrays = []
    for values in df._iter_column_arrays():       # pandas' own iterator of column arrays (2.x, 3.x): no Series
        values = _as_text(values)
        if not isinstance(values, np.ndarray) and not hasattr(values, "__arrow_array__"):
            values = pd.Series(values, copy=False)  # e.g. datetimes: converted as pyarrow converts a Series
        arrays.append(pa.array(values, from_pandas=True))
    return pa.Table.from_arrays(arrays, names=names)


@functools.cache
def _text_type() -> pa.DataType:
    """The Arrow type the frame route gives a column of text: large_string where pandas infers its
    str dtype (pandas 3), string where the column stays object (pandas 2)."""
    import numpy as np
    import pandas as pd

    return to_arrow(pd.DataFrame({"text": np.array(["a"], dtype=object)}), pandas_metadata=False).schema[0].type


def arrow_table(columns: Mapping[str, Any]) -> pa.Table:
    """The Arrow table `to_arrow(pd.DataFrame(columns), pandas_metadata=False)` gives, built
    without the frame (pandas costs ~0.1 ms a column, more than most per-rank tables' rows):
    numpy numbers and booleans as they are (NaN as null), an object column of text only as the
    frame route types text (_text_type); any other column (text with missing values, mixed types,
    an empty object column) goes through the frame, as before."""
    import numpy as np
    import pyarrow as pa

    names, arrays = [str(c) for c in columns], []
    for name, values in columns.items():
        if isinstance(values, np.ndarray) and values.ndim == 1 and values.dtype.kind in "biuf":
            arrays.append(pa.array(values, from_pandas=True))
        elif isinstance(values, np.ndarray) and values.dtype == object and len(values) \
                and all(type(v) is str for v in values.tolist()):
            arrays.append(pa.array(values, _text_type()))
        else:
            import pandas as pd

            arrays.append(to_arrow(pd.DataFrame({name: values}), pandas_metadata=False).column(0))
    return pa.Table.from_arrays(arrays, names=names)


def write_table(run_dir: Path, name: str, df: pd.DataFrame) -> Path:
    """Write one table atomically; returns its path."""
    import pyarrow.parquet as pq

    path = table_path(run_dir, name)
    table = to_arrow(df)
    return atomic_write(path, lambda tmp: pq.write_table(table, tmp), what="result table")


def read_table(run_dir: Path, name: str) -> pd.DataFrame | None:
    """One table as a DataFrame, None when the run has no such table.

    A damaged file raises ResultError naming it."""
    path = table_path(run_dir, name)
    if not path.is_file():
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    # One open file: a table replaced meanwhile (another collect) is read whole, old or new. A
    # native Arrow file, not a Python one: Arrow's I/O threads then never call back into Python,
    # which at interpreter exit aborts the process ("terminate called without an active exception").
    try:
        with pa.OSFile(str(path)) as source:
            return pq.read_table(source).to_pandas()
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ... on a damaged file
        raise ResultError(f"{path}: damaged result table ({str(exc).splitlines()[0][:120]}); "
                          "collect the run again (`hpcprof collect RUN` rewrites it)") from None


def list_tables(run_dir: Path) -> list[str]:
    """The names of the run's result tables, sorted."""
    directory = results_dir(run_dir)
    if not directory.is_dir():
        return []
    return sorted(p.name[:-len(SUFFIX)] for p in directory.iterdir()
                  if p.name.endswith(SUFFIX) and not p.name.startswith(".") and p.is_file())


def write_headline(run_dir: Path, headline: Headline) -> None:
    """Record the run's headline (collect's last step, after the tables it was computed from)."""
    atomic_write(results_dir(run_dir) / HEADLINE, json.dumps(headline._asdict()), what="headline")


def forget_headline(run_dir: Path) -> None:
    """Remove the recorded headline (collect's first step: the tables are about to change). Where it
    cannot be removed (results/ not writable), no table can be replaced either: it stays true."""
    with contextlib.suppress(OSError):
        (results_dir(run_dir) / HEADLINE).unlink(missing_ok=True)


def read_headline(run_dir: Path) -> Headline | None:
    """The headline collect recorded; None when there is none or it is damaged (the caller then
    computes it from the tables)."""
    try:
        data = json.loads(read_regular(results_dir(run_dir) / HEADLINE))   # a FIFO: refused, not waited on
        return Headline(*([(str(name), float(value), str(unit)) for name, value, unit in data[field]]
                          for field in Headline._fields))
    except (OSError, ValueError, TypeError, KeyError):
        return None
