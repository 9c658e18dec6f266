"""hpcprof.core.output's tables: rich's Table of printable cells, numbers right-aligned, a file or a pipe
drawn at WIDE columns, user text never parsed as markup nor able to drive the terminal."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from hpcprof.core.output import WIDE, print_table


@pytest.mark.parametrize("frame", [
    {"rank": [0, 1, 2], "busy %": [12.5, float("nan"), 1e-7], "kernel": ["aten::mm", None, "漢字 [bold]x[/]"], "ok": [True, False, True]},
    {"n": [], "name": []},
    {},
])
def test_emit_of_a_frame_is_rich_s_table_of_it(frame: dict[str, list[object]]) -> None:
    import pandas as pd

    from hpcprof.core.output import emit, render_table

    df = pd.DataFrame(frame)
    if len(df.columns) == 4:
        df.columns = ["rank", "busy %", "rank", "ok"]  # a repeated name stays two columns
    mine, theirs = io.StringIO(), io.StringIO()
    emit(df, "table", mine, title="a frame")
    Console(file=theirs, width=WIDE, emoji=False).print(render_table(df, "a frame"))
    assert mine.getvalue() == theirs.getvalue()
    if len(df.columns) == 4:
        text = mine.getvalue()
        assert "[bold]x[/]" in text and text.count(" rank ") == 2 and "1e-07" in text


def test_a_report_table_right_aligns_numbers_and_folds_at_the_width() -> None:
    buf = io.StringIO()
    long_name = "a kernel name far wider than the table may be " * 6
    print_table(buf, ["Total Time (ns)", "Name"], [True, False], [["7", "1,234,567"], ["short", long_name]],
                "x.sqlite: nvtxsum")
    lines = buf.getvalue().splitlines()
    assert lines[0].strip() == "x.sqlite: nvtxsum"
    assert {len(line) for line in lines} == {WIDE}                   # a file: drawn at WIDE columns
    assert lines[4].startswith("│               7 │ short ")        # the number right-aligned, the text left
    assert lines[5].startswith("│       1,234,567 │ a kernel name") and lines[6].startswith("│                 │ may be")
    assert " ".join(line.split("│")[2].strip() for line in lines[5:7]) == long_name.strip()   # folded, every word kept


def test_a_title_cannot_drive_the_terminal() -> None:
    buf = io.StringIO()
    print_table(buf, ["the number of ranks in this run"], [True], [["1"]], "run \x1b[31mred\x1b[0m")
    assert chr(27) not in buf.getvalue() and "run \\x1b[31mred\\x1b[0m" in buf.getvalue()
