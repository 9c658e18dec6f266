"""hpcprof.core.safe_paths and hpcprof.core.safe_text, one function per rule of what is written and shown, on real files:
outputs refused over inputs, workdir files, data files, special files and links; nothing written
through a link out of a run directory; FIFOs and devices never read; profile text as data in
rich, CSV, .xlsx and plotly."""

from __future__ import annotations

import io
import os
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console
from rich.table import Table

from hpcprof.core.errors import UnsafeFile, UserError, printable
from hpcprof.core.output import write_spreadsheet
from hpcprof.core.safe_paths import check_confined, check_output, read_regular, read_tail
from hpcprof.core.safe_text import csv_cell, csv_frame, plotly_escaped, rich_text

HOSTILE = '=HYPERLINK("https://evil.example")[/][link=https://evil.example]x[/link]\x1b]0;t\x07<a href="x">y</a>'


def test_outputs_over_what_hpcprof_reads_are_refused(tmp_path: Path) -> None:
    run = tmp_path / "w" / "t" / "r1"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / "job.sh").write_text("#!/bin/sh\n")
    store = tmp_path / "w" / "hpcprof.db"
    sqlite3.connect(store).close()
    export = tmp_path / "x.sqlite"
    with sqlite3.connect(export) as conn:
        conn.execute("CREATE TABLE t (a)")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link.csv"
    link.symlink_to(tmp_path / "mine.csv")
    source = tmp_path / "in.json"
    source.write_text("{}")
    refused = {store: "campaign store", tmp_path / "w" / "hpcprof.db-wal": "campaign store",
               run / "config.json": "inside the run directory", run / "results" / "new.html": "inside the run directory",
               export: "an SQLite database", fifo: "a FIFO", link: "a symbolic link", tmp_path: "a directory",
               tmp_path / "." / "in.json": "an input of this command"}
    for path, why in refused.items():
        with pytest.raises(UserError, match=why):
            check_output(path, [source], "--html")
    (tmp_path / "old.csv").write_text("a\n1\n")
    for fine in (tmp_path / "old.csv", tmp_path / "new.csv", tmp_path / "w" / "report.html"):
        check_output(fine, [source])


def test_no_write_through_a_link_out_of_the_run(tmp_path: Path) -> None:
    run, mine = tmp_path / "run", tmp_path / "mine"
    (run / "derived" / "nsys").mkdir(parents=True)
    mine.mkdir()
    (run / "results").symlink_to(mine)
    with pytest.raises(UserError, match=r"results: a symbolic link out of the run directory"):
        check_confined(run, "results", "derived")
    (run / "results").unlink()
    (run / "derived" / "nsys" / "parts").symlink_to(mine)
    with pytest.raises(UserError, match=r"parts: a symbolic link out"):
        check_confined(run, "results", "derived")
    (run / "derived" / "nsys" / "parts").unlink()
    (run / "real").mkdir()
    (run / "results").symlink_to("real")       # a link that stays inside the run directory
    check_confined(run, "results", "derived")


def test_fifos_and_devices_are_never_read(tmp_path: Path) -> None:
    fifo = tmp_path / "status"
    os.mkfifo(fifo)
    zero = tmp_path / "config.json"
    zero.symlink_to("/dev/zero")
    for path in (fifo, zero):
        with pytest.raises(UnsafeFile, match="not a regular file"):
            read_regular(path)
        with pytest.raises(UnsafeFile):
            read_tail(path, 100)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 2048)
    with pytest.raises(UnsafeFile, match="larger than"):
        read_regular(big, limit=1024)
    assert read_regular(big, limit=4096) == b"x" * 2048 and read_tail(big, 3) == b"xxx"


def test_profile_text_is_data_in_every_medium(tmp_path: Path) -> None:
    assert csv_cell("=1+1") == "'=1+1" and csv_cell("-1.5") == "-1.5" and csv_cell("@SUM(A1)") == "'@SUM(A1)"
    assert csv_cell("\tx") == "'\tx" and csv_cell("kernel") == "kernel" and csv_cell(3) == 3
    assert csv_cell("\x1b[2Jx", terminal=True) == "\\x1b[2Jx"
    df = pd.DataFrame({"name": [HOSTILE, "ok"], "n": [-1, 2]})
    assert csv_frame(df)["name"].tolist() == ["'" + HOSTILE, "ok"] and csv_frame(df)["n"].tolist() == [-1, 2]
    buf = io.StringIO()
    table = Table()
    table.add_column(rich_text(HOSTILE))
    table.add_row(rich_text(HOSTILE))
    Console(file=buf, force_terminal=True, width=400).print(table)
    assert "[/]" in buf.getvalue() and "\x1b]8;" not in buf.getvalue() and "\x1b]0;t" not in buf.getvalue()
    write_spreadsheet(df, tmp_path / "t.xlsx")
    from openpyxl import load_workbook

    cells = [c for row in load_workbook(tmp_path / "t.xlsx").active.iter_rows() for c in row]
    assert printable(HOSTILE) in [c.value for c in cells] and not [c for c in cells if c.data_type == "f"]
    import plotly.graph_objects as go

    fig = plotly_escaped(go.Figure([go.Bar(x=[HOSTILE], y=[1], name=HOSTILE, hovertext=[HOSTILE])]))
    assert fig.data[0].x[0].endswith("&lt;a href=\"x\"&gt;y&lt;/a&gt;") and fig.data[0].name == fig.data[0].x[0]
