"""hpcprof.output.print_table draws a report table byte for byte as rich draws it (rich is the reference)."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import random
import select
import struct
import termios
from collections.abc import Callable
from functools import partial
from typing import TextIO

import pytest
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from hpcprof.output import WIDE, _folded, print_table

#: ASCII, punctuation rich could take for markup, spaces, a 2-cell-wide character and an accented one
ALPHABET = "abc XYZ019,.:-_()[]/  é漢"
ASCII = "ab XY01,.:-_()   "


def rich_print(stream: TextIO, header: list[str], right: list[bool], rows: list[list[str]], title: str | None,
               width: int | None = None) -> None:
    table = Table(title=None if title is None else Text(title), show_lines=False)
    for name, numeric in zip(header, right, strict=True):
        table.add_column(Text(name), justify="right" if numeric else "left")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    Console(file=stream, width=width, emoji=False).print(table)


def rich_drawn(header: list[str], right: list[bool], rows: list[list[str]], title: str | None,
               stream: io.StringIO | None = None) -> str:
    buf = stream or io.StringIO()
    rich_print(buf, header, right, rows, title, None if isinstance(buf, Terminal) else WIDE)
    return buf.getvalue()


class Terminal(io.StringIO):
    """A stream taken for a terminal: rich styles it and takes its width from COLUMNS."""

    def isatty(self) -> bool:
        return True


def words(rng: random.Random, longest: int, alphabet: str = ALPHABET) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, longest)))


@pytest.mark.parametrize("seed", range(4))
def test_random_tables_are_drawn_as_rich_draws_them(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    rng = random.Random(seed)
    folded = 0
    for _ in range(150):
        ncol = rng.randint(1, 7)
        alphabet = rng.choice([ALPHABET, ASCII])  # an ASCII column is folded here, any other by rich's Text.wrap
        header = [words(rng, 12, alphabet) for _ in range(ncol)]
        right = [rng.random() < 0.5 for _ in range(ncol)]
        rows = [[words(rng, rng.choice([8, 30, 70]), alphabet) for _ in range(ncol)] for _ in range(rng.randint(0, 8))]
        title = rng.choice([None, "", "t", "a title: x", "a title longer than many of these tables are wide, folded"])
        columns = [[row[i] for row in rows] for i in range(ncol)]
        width = rng.choice([WIDE, 100, 80, 50, 30, 12])  # a file, or terminals of these widths
        monkeypatch.setenv("COLUMNS", str(width))
        mine, theirs = (io.StringIO(), io.StringIO()) if width == WIDE else (Terminal(), Terminal())
        print_table(mine, header, right, columns, title)
        assert mine.getvalue() == rich_drawn(header, right, rows, title, theirs), (header, right, rows, title, width)
        folded += sum(max([cell_len(h), *map(cell_len, c)]) for h, c in zip(header, columns, strict=True)) + 3 * ncol + 1 > width
    assert 30 < folded < 120  # both kinds ran: tables that fit their width, and tables folded to it


def test_a_report_of_many_rows_is_drawn_here(monkeypatch: pytest.MonkeyPatch) -> None:
    columns = [[f"{i * 7919 % 100_003:,d}" for i in range(2_000)],
               [f"aten::op_{i}, op_id = {i}" + " and a name too long for a terminal" * (i % 3 == 0) for i in range(2_000)]]
    given = []
    add_row = Table.add_row

    def counted(table: Table, *cells: Text, **options: object) -> None:
        given.append(cells)
        add_row(table, *cells, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(Table, "add_row", counted)
    monkeypatch.setenv("COLUMNS", "60")
    for stream in (io.StringIO(), Terminal()):  # a file (200 wide: every cell fits) and a terminal (a third fold)
        given.clear()
        print_table(stream, ["Total Time (ns)", "Range"], [True, False], columns, "NVTX-heavy.sqlite: nvtxsum")
        assert len(given) == 1  # one row reaches rich's Table: each column's widest cell, for rich's widths
        rows = [list(row) for row in zip(*columns, strict=True)]
        assert stream.getvalue() == rich_drawn(["Total Time (ns)", "Range"], [True, False], rows,
                                               "NVTX-heavy.sqlite: nvtxsum", type(stream)())


def test_an_ascii_cell_is_folded_as_rich_s_text_wraps_it() -> None:
    console = Console(width=80)
    rng = random.Random(7)
    for _ in range(3_000):
        text, width, numeric = words(rng, 40, ASCII), rng.randint(1, 20), rng.random() < 0.5
        if len(text) > width:  # the cells folded: those wider than their column
            wrapped = Text(text).wrap(console, width, justify="right" if numeric else "left", overflow="ellipsis")
            assert _folded(text, width, numeric) == [line.plain for line in wrapped], (text, width, numeric)


def on_a_terminal(draw: Callable[[TextIO], None], columns: int = 100) -> bytes:
    """What `draw` writes to a real pseudo-terminal `columns` wide (rich styles the header there)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    attrs = termios.tcgetattr(follower)
    attrs[1] &= ~termios.OPOST  # bytes as written (no \n -> \r\n)
    termios.tcsetattr(follower, termios.TCSANOW, attrs)
    chunks = []
    with open(follower, "w", encoding="utf-8", closefd=True) as stream:
        assert stream.isatty()
        draw(stream)
        stream.flush()
        while select.select([leader], [], [], 0.2)[0]:
            chunks.append(os.read(leader, 1 << 16))
    os.close(leader)
    return b"".join(chunks)


@pytest.mark.parametrize("env", [{"TERM": "xterm-256color"}, {"TERM": "dumb"}, {"NO_COLOR": "1", "TERM": "xterm"}])
def test_on_a_terminal_as_rich_draws_it(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TERM", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    header, right = ["Time (%)", "Name"], [True, False]
    for columns in ([["12.5", "1.0"], ["aten::mm", "漢字 kernel"]], [["1"], ["a name far wider than the terminal " * 4]]):
        rows = [list(row) for row in zip(*columns, strict=True)]
        mine = on_a_terminal(partial(print_table, header=header, right=right, columns=columns, title="x.sqlite: nvtxsum"))
        theirs = on_a_terminal(partial(rich_print, header=header, right=right, rows=rows, title="x.sqlite: nvtxsum"))
        assert mine == theirs != b""
        if env["TERM"] != "dumb":
            assert b"\x1b[1m" in mine  # the header is bold there: drawn by rich


@pytest.mark.parametrize("frame", [
    {"rank": [0, 1, 2], "busy %": [12.5, float("nan"), 1e-7], "kernel": ["aten::mm", None, "漢字 [bold]x[/]"], "ok": [True, False, True]},
    {"n": [], "name": []},
    {},
])
def test_emit_of_a_frame_is_rich_s_table_of_it(frame: dict[str, list[object]]) -> None:
    import pandas as pd

    from hpcprof.output import emit, render_table

    df = pd.DataFrame(frame)
    if len(df.columns) == 4:
        df.columns = ["rank", "busy %", "rank", "ok"]  # a repeated name stays two columns
    mine, theirs = io.StringIO(), io.StringIO()
    emit(df, "table", mine, title="a frame")
    Console(file=theirs, width=WIDE, emoji=False).print(render_table(df, "a frame"))
    assert mine.getvalue() == theirs.getvalue()


def test_a_title_cannot_drive_the_terminal() -> None:
    buf = io.StringIO()
    print_table(buf, ["the number of ranks in this run"], [True], [["1"]], "run \x1b[31mred\x1b[0m")
    assert chr(27) not in buf.getvalue() and "run \\x1b[31mred\\x1b[0m" in buf.getvalue()
