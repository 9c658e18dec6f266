"""The numbers of `nsys stats`, as nsys's SQL computes them.

Total = Σ(end-start); Avg/Med/StdDev rounded to one decimal as the nsys of the layout rounds
(SQLite 3.36's long-double printf for 2022.4; for 2025 the exact binary value rounded half away
from zero: 239194.65 is 239194.6499.. and prints .6); StdDev is the sample standard deviation as
SQLite's `stdev()` computes it (Welford's update over the rows in table order; 0 for fewer than 2
values); Time % = round(100·total/Σtotal, 1); rows sorted by total, descending, ties in GROUP BY
order (SQLite's ORDER BY sort is stable, so rows with equal sort keys keep the order the grouping
produced them in: keys ascending, NULL first, text in byte order).

The scalar functions (sqlite_round1, exact_round1, round1, sample_stdev) are the standard library
only: the rules (rules.py) use them without importing numpy. The `_array` functions, Groups and
the group-by helpers are the columnar engine's (numpy, imported when first used). Packing: a group key and a value in one int64 (`key << 41 | value`), so one int64 sort
gives groups, medians and all.
"""

from __future__ import annotations

import importlib
import math

from hpcprof.core.cpus import usable_cpus
from hpcprof.core.lazy import LazyModule
from hpcprof.tools.nsys.stats.schema import OLD
from hpcprof.tools.nsys.stats.table import SUMMARY_COLS

TYPE_CHECKING = False          # typing's constant without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

    import numpy as np
else:
    class _Numpy(LazyModule):
        """numpy, imported when an array function first runs (the rules import this module), then
        bound as this module's `np`: a LazyModule look-up costs 2-8 µs, and a summary report makes
        ~50 of them."""

        def __getattr__(self, attr: str) -> Any:
            global np
            np = importlib.import_module("numpy")
            return getattr(np, attr)

    np = _Numpy("numpy")


# ---------------------------------------------------------------------------------------
# one value (standard library)


#: a dyadic number n · 2^e (n >= 0), exact: the values SQLite's long-double arithmetic works on
Dyadic = tuple[int, int]


def _dyadic(x: float) -> Dyadic:
    """The float `x` >= 0, exactly."""
    n, d = x.as_integer_ratio()
    return n, 1 - d.bit_length()


def _plus(a: Dyadic, b: Dyadic) -> Dyadic:
    e = min(a[1], b[1])
    return (a[0] << (a[1] - e)) + (b[0] << (b[1] - e)), e


def _long_double(a: Dyadic) -> Dyadic:
    """`a` rounded to x87 extended precision (64-bit significand, ties to even)."""
    n, e = a
    drop = n.bit_length() - 64
    if drop <= 0:
        return a
    kept, rest, half = n >> drop, n & ((1 << drop) - 1), 1 << (drop - 1)
    return kept + (rest > half or (rest == half and kept & 1)), e + drop


def sqlite_tenths(mag: float) -> int:
    """The tenths SQLite 3.36 keeps of `mag` >= 0 (finite), exactly: floor((mag + 0.05 + mag · 3e-16)
    · 10), each step in x87 long double (the fudge only below 10^15), in integers."""
    exact = _dyadic(mag)
    exponent = math.frexp(mag)[1] - 1
    fudge = (0, 0)
    if 1 + exponent // 3 < 15:
        three = _dyadic(3e-16)
        fudge = _long_double((exact[0] * three[0], exact[1] + three[1]))
    total = _long_double(_plus(_long_double(_plus(exact, _dyadic(0.05))), fudge))
    n, e = _long_double((total[0] * 10, total[1]))
    return n << e if e >= 0 else n >> -e


def sqlite_round1(x: float) -> float:
    """round(x, 1) as SQLite 3.36 (inside nsys 2022.4) computes it: `%.1f` in long double after
    adding 0.05 and a 3e-16 relative fudge (sqlite_tenths); NaN stays NaN. In float64, (|x| + 0.05)
    · 10 is within 6e-16 (relative) of SQLite's long-double value, so where it is further than
    1e-14 from an integer its floor is SQLite's; only the nearer ones (the ties, x.x5) are
    emulated exactly (~20 µs each, against ~0.3 µs)."""
    if math.isnan(x):
        return x
    near = (abs(x) + 0.05) * 10.0
    whole = math.floor(near) if math.isfinite(near) else 0
    clear = near - whole > near * 1e-14 and whole + 1 - near > near * 1e-14
    tenths = whole if clear else sqlite_tenths(abs(x))
    if x == 0:
        return 0.0
    return math.copysign(1.0, x) * (float(tenths) / 10.0) + 0.0


def exact_round1(x: float) -> float:
    """round(x, 1) as nsys 2025 computes it: the float64 value's exact binary expansion rounded
    half away from zero, so 3193803.15 (stored as 3193803.1499999...) gives 3193803.1 and
    8921.25 (exact in binary) gives 8921.3; NaN stays NaN."""
    quarters = x * 4.0                  # exact (a power of 2); an odd integer at the only true ties
    if quarters % 2.0 != 1.0:
        return round(x, 1)              # CPython rounds the exact binary value correctly; NaN stays NaN
    tenths = (5 * abs(int(quarters)) + 1) // 2    # |x| = q/4 = 2.5q tenths: half away from zero
    return math.copysign(tenths / 10, x)


def round1(x: float, layout: str) -> float:
    """round(x, 1) as the nsys of `layout` computes it."""
    return sqlite_round1(x) if layout == OLD else exact_round1(x)


def sample_stdev(values: Iterable[float], count: int) -> float:
    """The sample standard deviation of `count` values as SQLite's `stdev()` computes it: Welford's
    running update over the values in table row order, whose rounding error decides a tie (a true
    1.75 comes out 1.7499999999999998 and prints 1.7); 0 for fewer than 2 values."""
    mean = spread = 0.0
    for k, x in enumerate(values, start=1):
        delta = x - mean
        mean += delta / k
        spread += delta * (x - mean)
    return math.sqrt(spread / (count - 1)) if count > 1 else 0.0


# ---------------------------------------------------------------------------------------
# columns (numpy)


def sqlite_round1_array(x: np.ndarray) -> np.ndarray:
    """sqlite_round1 of every value, in numpy's long double (the x87 format SQLite 3.36 uses)."""
    x = np.asarray(x, dtype=np.float64)
    mag = np.abs(x).astype(np.longdouble)
    exps = np.frexp(np.abs(x))[1] - 1
    fudge = np.where(1 + exps // 3 < 15, mag * np.longdouble(3e-16), 0)
    tenths = np.floor((mag + np.longdouble(np.float64(0.05)) + fudge) * 10)
    with np.errstate(invalid="ignore"):
        out = np.sign(x) * (tenths.astype(np.float64) / 10.0)
    return np.where(np.isnan(x), np.nan, out + 0.0)


def exact_round1_array(x: np.ndarray) -> np.ndarray:
    """exact_round1 of every value."""
    return np.asarray([exact_round1(v) for v in np.asarray(x, dtype=np.float64).tolist()], dtype=np.float64)


def round1_array(x: np.ndarray, layout: str) -> np.ndarray:
    """round1 of every value."""
    return sqlite_round1_array(x) if layout == OLD else exact_round1_array(x)


PACK_BITS = 41                       # value bits of a packed (key << 41 | value) int64
PACK_MASK = (1 << PACK_BITS) - 1     # values 0 .. 2^41-1 ns (36 min) or bytes (2 TB)
PACK_KEYS = 1 << 22                  # keys 0 .. 2^22-1
DUR = '"end" - "start"'              # SQL of a row's duration


def pack_sql(key: str, value: str) -> str:
    """SQL of `key << 41 | value` for one int64 column, -1 where either is out of range or NULL
    (then the caller falls back to reading the columns separately)."""
    return (f"CASE WHEN ({value}) BETWEEN 0 AND {PACK_MASK} AND ({key}) BETWEEN 0 AND {PACK_KEYS - 1} "
            f"THEN (({key}) << {PACK_BITS}) | ({value}) ELSE -1 END")


#: arrays of more values than this are sorted in parallel slices (sort_in_place)
PARALLEL_SORT_VALUES = 1 << 20


def sort_in_place(v: np.ndarray) -> None:
    """Sort the integer array `v` in place, as `v.sort()` does: a large one as one slice per core,
    each sorted in its own thread (numpy's sort releases the GIL), then their runs merged by one
    stable sort (a timsort, which merges presorted runs in linear time): on 2 cores about 0.6 of
    one sort's wall time."""
    slices = min(usable_cpus(), len(v) // PARALLEL_SORT_VALUES)
    if slices < 2:
        v.sort()
        return
    from concurrent.futures import ThreadPoolExecutor

    bounds = [len(v) * i // slices for i in range(slices + 1)]
    with ThreadPoolExecutor(slices) as pool:
        list(pool.map(lambda i: v[bounds[i]:bounds[i + 1]].sort(), range(slices)))
    v.sort(kind="stable")


def exact_sum(values: np.ndarray) -> int:
    """The exact sum of integers `values`: in int64 where no partial sum can overflow it (the
    largest magnitude times the count below 2^63), else as Python integers."""
    if not len(values):
        return 0
    bound = max(abs(int(values.min())), abs(int(values.max())))
    return int(values.sum()) if bound * len(values) < 1 << 63 else sum(values.tolist())


#: values per block of squared deviations (_squared_deviations): 2 MB of float64, reused block
#: after block instead of two arrays as long as the values (fresh pages cost this VM ~3 us each)
DEVIATION_BLOCK = 1 << 18


def _squared_deviations(v: np.ndarray, starts: np.ndarray, n: np.ndarray, avg: np.ndarray) -> np.ndarray:
    """Σ (x - avg)² of each group of `v` (groups contiguous: `n` values from `starts`, all
    nonempty), in blocks of DEVIATION_BLOCK values, each group's running sum carried into the
    next block."""
    ends = starts + n
    ss = np.zeros(len(starts))
    block = np.empty(min(len(v), DEVIATION_BLOCK))
    for a in range(0, len(v), DEVIATION_BLOCK):
        b = min(a + DEVIATION_BLOCK, len(v))
        first, last = np.searchsorted(ends, a, "right"), np.searchsorted(starts, b, "left")
        lo = np.maximum(starts[first:last], a) - a
        d = block[:b - a]
        np.subtract(v[a:b], np.repeat(avg[first:last], np.minimum(ends[first:last], b) - a - lo), out=d)
        d *= d
        ss[first:last] += np.add.reduceat(d, lo)
    return ss


class Groups:
    """Sample statistics of `values` per group code (codes 0..n-1 in GROUP BY order)."""

    def __init__(self, codes: np.ndarray, values: np.ndarray, ngroups: int) -> None:
        if len(values) and ngroups < PACK_KEYS and values.min() >= 0 and values.max() <= PACK_MASK:
            v = codes.astype(np.int64)                  # one int64 sort instead of a lexsort
            v <<= PACK_BITS
            v |= values
            sort_in_place(v)
            v &= PACK_MASK                              # groups are contiguous: counts give the bounds
        else:
            v = values[np.lexsort((values, codes))]
        self._reduce(v, np.bincount(codes, minlength=ngroups).astype(np.int64),
                     lambda g: values[codes == g])

    @classmethod
    def from_packed(cls, v: np.ndarray, in_rows: Callable[[int], np.ndarray] | None = None,
                    ) -> tuple[np.ndarray, Groups]:
        """Groups of packed `key << 41 | value` (sorted here, in place): (keys ascending, groups).
        `in_rows(key)`: that key's values in row order, for StdDev ties (see _stdev_at_ties);
        without it they come from a copy of `v` made before the sort."""
        kept = v.copy() if in_rows is None else v[:0]
        values_of = in_rows or (lambda key: kept[(kept >> PACK_BITS) == key] & PACK_MASK)
        sort_in_place(v)
        keys = v >> PACK_BITS
        starts = np.flatnonzero(keys[1:] != keys[:-1]) + 1 if len(v) else np.empty(0, dtype=np.int64)
        starts = np.concatenate(([0], starts)) if len(v) else starts
        ukeys = keys[starts]
        del keys
        v &= PACK_MASK
        g = cls.__new__(cls)
        g._reduce(v, np.diff(np.append(starts, len(v))).astype(np.int64), lambda i: values_of(int(ukeys[i])))
        return ukeys, g

    def _reduce(self, v: np.ndarray, count: np.ndarray, in_rows: Callable[[int], np.ndarray]) -> None:
        """Statistics of `v`, sorted by (group, value), groups of `count` values each;
        `in_rows(g)` gives group g's values in the export's row order."""
        ngroups = len(count)
        self.count = count
        starts = np.concatenate(([0], np.cumsum(self.count)[:-1])).astype(np.int64)
        nonempty = self.count > 0
        s = starts[nonempty]
        n = self.count[nonempty]
        self.total = np.zeros(ngroups, dtype=np.int64)
        self.min = np.zeros(ngroups, dtype=np.int64)
        self.max = np.zeros(ngroups, dtype=np.int64)
        self.med = np.full(ngroups, np.nan)
        self.std = np.zeros(ngroups)
        with np.errstate(invalid="ignore", divide="ignore"):
            if len(v):
                self.total[nonempty] = np.add.reduceat(v, s)
                self.min[nonempty] = v[s]
                self.max[nonempty] = v[s + n - 1]
                self.med[nonempty] = (v[s + (n - 1) // 2].astype(np.float64) + v[s + n // 2]) / 2.0
            self.avg = self.total / self.count
            if len(v):
                ss = _squared_deviations(v, s, n, self.avg[nonempty])
                self.std[nonempty] = np.where(n > 1, np.sqrt(ss / np.maximum(n - 1, 1)), 0.0)
                self._stdev_at_ties(in_rows, nonempty)

    def _stdev_at_ties(self, in_rows: Callable[[int], np.ndarray], nonempty: np.ndarray) -> None:
        """Where the two-pass StdDev sits on a rounding tie (x.x5), recompute it as nsys's SQLite
        `stdev()` does (sample_stdev: Welford over the rows in table order)."""
        tens = self.std * 10.0
        tie = nonempty & (self.count > 1) & (np.abs(tens - np.floor(tens) - 0.5) < 1e-9 * np.maximum(tens, 1.0))
        for g in np.flatnonzero(tie):
            self.std[g] = sample_stdev(in_rows(int(g)).tolist(), int(self.count[g]))

    def ratio(self, layout: str, grand: np.ndarray | None = None) -> np.ndarray:
        """Time %: round(100·total/Σtotal, 1); `grand`: each group's Σtotal (int64), where the
        groups are of several exports (summaries.py), else the sum over all groups."""
        over = float(self.total.sum()) if grand is None else grand.astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return round1_array(self.total.astype(np.float64) * 100.0 / over, layout)

    def summary(self, count_label: str, layout: str, grand: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The eight standard summary columns (`grand`: see ratio)."""
        cols = [c.format(count=count_label) for c in SUMMARY_COLS]
        vals = [self.ratio(layout, grand), self.total, self.count, round1_array(self.avg, layout),
                round1_array(self.med, layout), self.min, self.max, round1_array(self.std, layout)]
        return dict(zip(cols, vals, strict=True))


#: object arrays up to this length are factorized in Python (`pa.array` of text imports pandas)
PYTHON_FACTORIZE_MAX = 200_000


def factorize_sorted(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(code of each value, distinct values in SQLite's order: ascending, NULL first). Values are
    hashed in Arrow and only the distinct ones sorted; text as Python orders str (code points,
    which is SQLite's byte order of UTF-8), None and NaN as NULL."""
    import pyarrow as pa

    from hpcprof.tools.nsys.stats.arrow import numpy_of

    if key.dtype != object:                               # numbers: no NULL
        index, uniq = distinct_of(key)
        nulls = False
    elif len(key) <= PYTHON_FACTORIZE_MAX:
        return _factorize_objects(key)
    else:
        encoded = pa.array(key, type=pa.string(), from_pandas=True).dictionary_encode()
        uniq = np.asarray(encoded.dictionary.to_numpy(zero_copy_only=False), dtype=object)
        index, nulls = numpy_of(encoded.indices), encoded.indices.null_count > 0
    order = np.argsort(uniq, kind="stable")
    rank = np.empty(len(uniq) + 1, dtype=np.int64)
    rank[order] = np.arange(len(uniq))
    if not nulls:
        return rank[index], uniq[order]
    rank[-1] = -1                                         # NULL: a code before every value
    codes = rank[np.where(np.isnan(index), len(uniq), index).astype(np.int64)] + 1
    return codes, np.concatenate((np.array([None], dtype=object), uniq[order].astype(object)))


def distinct_of(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of each value into the distinct values, the distinct values in order of first
    appearance) of an integer array without NULLs, by Arrow's hash: the index is a view of Arrow's
    int32 indices (kernel-heavy's 2.15 M grids: no int64 copy and no sorted codes made per row)."""
    from hpcprof.tools.nsys.stats.arrow import arrow_of, numpy_of

    encoded = arrow_of(values).dictionary_encode()
    return numpy_of(encoded.indices), numpy_of(encoded.dictionary)


def _factorize_objects(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """factorize_sorted of an object array (text, None/NaN as NULL) with a dict."""
    index: dict[object, int] = {}
    raw = np.fromiter((index.setdefault(None if v is None or v != v else v, len(index)) for v in key.tolist()),
                      dtype=np.int64, count=len(key))
    distinct: list[Any] = list(index)
    # NULL first, then the texts by value (no tuple made per text)
    order = [i for i, v in enumerate(distinct) if v is None]
    order += sorted((i for i, v in enumerate(distinct) if v is not None), key=lambda i: distinct[i])
    rank = np.empty(len(distinct), dtype=np.int64)
    rank[order] = np.arange(len(distinct))
    return rank[raw] if len(raw) else raw, np.array([distinct[i] for i in order] + [None], dtype=object)[:-1]


def group_codes(*keys: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Codes of the distinct key tuples, numbered in sorted (SQLite GROUP BY) order.

    NULL (None) sorts first, as in SQLite. Returns (codes, unique values per key)."""
    sub_codes, uniques = [], []
    for key in keys:
        codes, uniq = factorize_sorted(np.asarray(key))
        uniques.append(uniq)
        sub_codes.append(codes)
    if len(keys) == 1:
        return sub_codes[0], uniques
    dims = [len(u) for u in uniques]
    flat = np.ravel_multi_index(sub_codes, dims)
    used, codes = np.unique(flat, return_inverse=True)
    idx = np.unravel_index(used, dims)
    return codes.astype(np.int64), [u[i] for u, i in zip(uniques, idx, strict=True)]


def text_rank(values: np.ndarray) -> np.ndarray:
    """Sort rank of text values (NULL first), for use as a tie-break key."""
    codes, _ = group_codes(np.asarray(values, dtype=object))
    return codes


def by_total(total: np.ndarray, *tiebreak: np.ndarray) -> np.ndarray:
    """Row order: total descending, then the tie-break keys ascending, then group order."""
    keys = [np.arange(len(total))] + [np.asarray(t) for t in reversed(tiebreak)] + [-total]
    return np.lexsort(keys)


def join_rows(left: list[np.ndarray], right: list[np.ndarray], keep_unmatched: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(left row, right row) of every pair whose key columns (`left[i]` against `right[i]`) are
    all equal, as pandas' `merge(sort=False)` orders them: left rows in order, each one's matches
    in right order; `keep_unmatched` (a LEFT JOIN): a left row without a match once, right row -1."""
    nleft = len(left[0])
    lcode = np.zeros(nleft, dtype=np.int64)
    rcode = np.zeros(len(right[0]), dtype=np.int64)
    for lkey, rkey in zip(left, right, strict=True):
        uniq, inverse = np.unique(np.concatenate((lkey, rkey)), return_inverse=True)
        lcode = lcode * len(uniq) + inverse[:nleft]
        rcode = rcode * len(uniq) + inverse[nleft:]
    order = np.argsort(rcode, kind="stable")
    ordered = rcode[order]
    lo = np.searchsorted(ordered, lcode, "left")
    counts = np.searchsorted(ordered, lcode, "right") - lo
    missing = counts == 0
    if keep_unmatched:
        counts[missing] = 1
    rows = np.repeat(np.arange(nleft), counts)
    at = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(lo, counts)
    matched = order[np.minimum(at, len(order) - 1)] if len(order) else np.full(len(rows), -1)
    if keep_unmatched:
        matched[np.repeat(missing, counts)] = -1
    return rows, matched
