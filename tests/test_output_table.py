"""hpcprof.output.print_table draws a report table byte for byte as rich draws it (rich is the reference)."""

from __future__ import annotations

import io
import random

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from hpcprof.output import WIDE, _drawn_table, print_table

#: ASCII, punctuation rich could take for markup, spaces, a 2-cell-wide character and an accented one
ALPHABET = "abc XYZ019,.:-_()[]/  é漢"


def rich_drawn(header: list[str], right: list[bool], rows: list[list[str]], title: str | None) -> str:
    table = Table(title=None if title is None else Text(title), show_lines=False)
    for name, numeric in zip(header, right, strict=True):
        table.add_column(Text(name), justify="right" if numeric else "left")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    buf = io.StringIO()
    Console(file=buf, width=WIDE, emoji=False).print(table)
    return buf.getvalue()


def words(rng: random.Random, longest: int) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, longest)))


@pytest.mark.parametrize("seed", range(4))
def test_random_tables_are_drawn_as_rich_draws_them(seed: int) -> None:
    rng = random.Random(seed)
    drawn_here = 0
    for _ in range(150):
        ncol = rng.randint(1, 7)
        header = [words(rng, 12) for _ in range(ncol)]
        right = [rng.random() < 0.5 for _ in range(ncol)]
        rows = [[words(rng, rng.choice([8, 30, 70])) for _ in range(ncol)] for _ in range(rng.randint(0, 8))]
        title = rng.choice([None, "", "t", "a title: x", "a title longer than many of these tables are wide, folded"])
        columns = [[row[i] for row in rows] for i in range(ncol)]
        buf = io.StringIO()
        print_table(buf, header, right, columns, title)
        assert buf.getvalue() == rich_drawn(header, right, rows, title), (header, right, rows, title)
        drawn_here += _drawn_table(header, right, columns, title, WIDE) is not None
    assert 50 < drawn_here < 150  # both paths ran: drawn here, and left to rich (too wide, a folded title)


def test_a_report_of_many_rows_is_drawn_here() -> None:
    columns = [[f"{i * 7919 % 100_003:,d}" for i in range(2_000)], [f"aten::op_{i}, op_id = {i}" for i in range(2_000)]]
    buf = io.StringIO()
    print_table(buf, ["Total Time (ns)", "Range"], [True, False], columns, "NVTX-heavy.sqlite: nvtxsum")
    rows = [list(row) for row in zip(*columns, strict=True)]
    assert buf.getvalue() == rich_drawn(["Total Time (ns)", "Range"], [True, False], rows, "NVTX-heavy.sqlite: nvtxsum")
    assert _drawn_table(["Total Time (ns)", "Range"], [True, False], columns, None, WIDE) is not None
