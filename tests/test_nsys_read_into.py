"""Export.read_into (the integer reads' arrays filled in place, part by part) gives the rows SQLite
gives: rowid gaps, a `where`, NULLs, several parts and batches, and a column that is not integers."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

import hpcprof.tools.nsys.stats.db as nsys_db
from hpcprof.tools.nsys.stats.db import Export
from hpcprof.tools.nsys.stats.loaders import nullable_ints
from hpcprof.tools.nsys.stats.schema import NsysInputError

ROWS = 5000


def _export(tmp_path: Path, rowids: str, text: bool = False) -> Path:
    """A table T (a, b, c) of ROWS rows: b NULL on every 7th row, c NULL from row 4000 on (a batch of
    NULLs only); `rowids` "dense" (1..ROWS), "gaps" (every 3rd row deleted, the last 1000 rows'
    rowids shifted by 10^4) or "sparse" (shifted by 10^8: a span longer than the file, read by
    map_batches); `text`: one value of c is text."""
    gaps = rowids != "dense"
    shift = 10**8 if rowids == "sparse" else 10**4
    db = tmp_path / f"{rowids}.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE T (a INTEGER, b INTEGER, c INTEGER)")
    con.executemany("INSERT INTO T (rowid, a, b, c) VALUES (?, ?, ?, ?)",
                    [(i + (shift if gaps and i > ROWS - 1000 else 0), i * 3 - 7000, None if i % 7 == 0 else i,
                      None if i >= 4000 else -i) for i in range(1, ROWS + 1)])
    if gaps:
        con.execute("DELETE FROM T WHERE rowid % 3 = 0")
    if text:
        con.execute("UPDATE T SET c = 'x' WHERE rowid = 10")
    con.commit()
    con.close()
    return db


def _expected(db: Path, where: str) -> dict[str, np.ndarray]:
    rows = sqlite3.connect(db).execute(f"SELECT a, b, c FROM T{' WHERE ' + where if where else ''} "
                                       "ORDER BY rowid").fetchall()
    out = {}
    for i, c in enumerate("abc"):
        values = [r[i] for r in rows]
        out[c] = np.array([0 if v is None else v for v in values], dtype=np.int64)
        out[c + "?"] = np.array([v is None for v in values], dtype=bool)
    return out


@pytest.fixture
def small_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nsys_db, "SPLIT_ROWS", 1000)        # split into parallel parts ...
    monkeypatch.setattr(nsys_db, "BATCH_ROWS", 256)         # ... of many batches each
    monkeypatch.setattr(nsys_db, "SMALL_READ_ROWS", 10)     # through ADBC, not sqlite3


@pytest.fixture
def small_parts(small_reads: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nsys_db, "MIN_PARTS", 3)            # 3 parts on any machine


@pytest.mark.parametrize("rowids", ["dense", "gaps", "sparse"])
@pytest.mark.parametrize("where", ["", "a % 5 = 1", "a > 100000"])
def test_nullable_ints_equal_sqlite(tmp_path: Path, small_parts: None, rowids: str, where: str) -> None:
    db = _export(tmp_path, rowids)
    with Export(db) as export:
        got = nullable_ints(export, "T", ["a", "b", "c"], where)
        ints = export.sql_ints("a, coalesce(b, 0)", "T", where, ncols=2)
    expected = _expected(db, where)
    assert set(got) == set(expected)
    for key, values in expected.items():
        np.testing.assert_array_equal(got[key], values, err_msg=key)
    np.testing.assert_array_equal(ints[0], expected["a"])
    np.testing.assert_array_equal(ints[1], expected["b"])


def test_a_text_value_is_a_damaged_export(tmp_path: Path, small_parts: None) -> None:
    """Text in an integer column: one line naming the table, from both reads."""
    db = _export(tmp_path, "gaps", text=True)
    with Export(db) as export:
        with pytest.raises(NsysInputError, match="T holds values that are not integers"):
            nullable_ints(export, "T", ["a", "c"])
        with pytest.raises(NsysInputError, match="T holds values that are not integers"):
            export.sql_ints("coalesce(c, 0)", "T")


@pytest.mark.parametrize("cpus, parts", [(1, 2), (2, 2), (4, 4), (64, 5)])
def test_parts_follow_the_cpus(tmp_path: Path, small_reads: None, cpus: int, parts: int) -> None:
    """A large table is read in one rowid part per CPU the export may use, MIN_PARTS at least and
    no part under SPLIT_ROWS rows (5,000 rows: 5 parts of 1,000 at most), covering the rowids once;
    the values those SQLite gives, whatever the part count."""
    db = _export(tmp_path, "dense")
    with Export(db, cpus) as export:
        ranges = export._parts("T")
        got = nullable_ints(export, "T", ["a", "b", "c"])
    spans = [r for r in ranges if r is not None]
    assert len(spans) == len(ranges) == parts
    assert spans[0][0] == 1 and spans[-1][1] == ROWS
    assert [lo for lo, _ in spans[1:]] == [hi + 1 for _, hi in spans[:-1]]    # contiguous, no rowid twice
    for key, values in _expected(db, "").items():
        np.testing.assert_array_equal(got[key], values, err_msg=key)


def test_parts_default_to_the_usable_cpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without `cpus`, an export reads on the CPUs this process may use (cpus.usable_cpus)."""
    monkeypatch.setattr(nsys_db, "usable_cpus", lambda: 3)
    with Export(_export(tmp_path, "dense")) as export:
        assert export.cpus == 3

