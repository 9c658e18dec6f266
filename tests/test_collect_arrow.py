"""collect's per-file tables built as Arrow (hpcprof.run.results.arrow_table, nsys analyse_tables) are
the tables the pandas route made: same schemas, same values.

tests/data/collect_tables_5481a9c.json holds, for every nsys export of the fixtures that collect
analyses, each table's rows and the SHA-256 of its schema and of its values, as collect's map step
wrote them at commit 5481a9c (every table a DataFrame converted by results.to_arrow; pandas 3.1.1,
pyarrow 26.0.1). It was made by
running this file at that commit: `PYTHONPATH=<worktree at 5481a9c> python tests/test_collect_arrow.py`.
The entries of nsys/nsysai_h100_2gpu_1s, nsysai_mfu_2gpu_before and _after were made again (the same
way) when their window became the steps found in their kernels (they carry no iteration
ranges): their windowed tables (window, iterations, kernels, nccl, overlap, phases, timeline, gaps)
changed, their other tables did not.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hpcprof.analysis.critical_path import OVERLAP
from hpcprof.analysis.detect_steps import MIN_STEPS, WARMUP_STEPS

GOLDEN = Path(__file__).resolve().parent / "data" / "collect_tables_5481a9c.json"
#: the exports without marks, whose steps are found in their kernels: their window leaves the warm-up out
#: since 5481a9c (hpcprof.analysis.detect_steps), so their window's tables are recorded again here
DETECTED = Path(__file__).resolve().parent / "data" / "collect_tables_detected.json"


def table_digest(table: pa.Table) -> list:
    """[rows, SHA-256 of the schema, of the values (their repr, column by column)], 80 bits of each."""
    values = json.dumps([[repr(v) for v in column.to_pylist()] for column in table.columns])
    return [table.num_rows, hashlib.sha256(table.schema.remove_metadata().to_string().encode()).hexdigest()[:20],
            hashlib.sha256(values.encode()).hexdigest()[:20]]


def collected(fixtures: Path) -> dict[str, dict[str, list]]:
    """Each usable nsys export under `fixtures` -> {table: digest} of the bundle collect's map step writes."""
    from hpcprof.collect.cache import FilePart
    from hpcprof.collect.mapping import map_task
    from hpcprof.core.pool import read_bundle
    from hpcprof.run.ranks import rank_from_filename

    out = {}
    for path in sorted(fixtures.rglob("*.sqlite")):
        with tempfile.TemporaryDirectory() as parts:
            [outcome] = map_task("nsys", [(str(path), rank_from_filename(path) or 0)], parts, "task.arrow", {})
            if not isinstance(outcome, FilePart):   # an export collect cannot use (no StringIds, no GPU rows)
                continue
            tables = read_bundle(Path(parts) / "task.arrow")
        digests = {n: table_digest(t) for n, t in tables.items()}
        if "critical_path_events" in tables:      # the work beside each collective apart (ADDED_SINCE)
            events = tables["critical_path_events"]
            beside = pc.equal(events["kind"], OVERLAP)
            digests["critical_path_events"] = table_digest(events.filter(pc.invert(beside)))
            digests["critical_path_overlap"] = table_digest(events.filter(beside))
        out[path.relative_to(fixtures).as_posix()] = {"(order)": list(tables), **digests}
    return out


#: the per-rank tables collect writes that 5481a9c did not (bus bandwidth per collective; the idle
#: attribution of the step hook's steps: empty on these exports, which have none), and the critical
#: path events' rows of the work beside each collective (kind `overlap`), digested apart from the rest
ADDED_SINCE = {"busbw", "idle_causes", "step_idle", "lines", "critical_path_overlap"}


@pytest.mark.slow
@pytest.mark.skipif(int(pd.__version__.split(".")[0]) < 3, reason="the digests were recorded with pandas 3.1.1 "
                    "(text as large_string; pandas 2 keeps text columns as object: string)")
def test_collect_tables_equal_those_of_the_pandas_route(fixtures_dir: Path) -> None:
    """Every table of every usable fixture export is the one 5481a9c wrote (31 exports, 16-18 tables
    each). Echo's two minimal exports, whose tables lack globalPid and globalTid, are usable since
    those columns are read as NULL (as NVTX's optional ones are): 5481a9c stopped on them; the DDP
    exports with NCCL's payloads (nsys/ddp_blobs), the idle attribution's planted programs (idle_gpu) and
    the busbw and idle tables (ADDED_SINCE) came after it; nsys-ai's three exports without marks
    (DETECTED) have their warm-up left out since."""
    golden = json.loads(GOLDEN.read_text())
    got = collected(fixtures_dir)
    idle = [f"idle_gpu/nsys-{cause}/profiles/rank0.sqlite" for cause in ("control", "input", "launch", "sync")]
    assert len(golden) == 31 and sorted(set(got) - set(golden)) == ["echo/quirks/ws1.sqlite", "echo/quirks/ws2.sqlite",
                                                                     *idle, "nsys/ddp_blobs/rank0.sqlite",
                                                                     "nsys/ddp_blobs/rank1.sqlite"]
    detected = json.loads(DETECTED.read_text())
    for export, tables in golden.items():
        mine = {name: digest for name, digest in got[export].items() if name not in ADDED_SINCE}
        mine["(order)"] = [name for name in got[export]["(order)"] if name not in ADDED_SINCE]
        if export in detected:      # one rank's steps each: as many as before but the warm-up left out
            before, now = tables["iterations"][0], mine["iterations"][0]
            assert now == before - min(WARMUP_STEPS, before - MIN_STEPS), export
            tables = detected[export]
        assert mine == tables, export
        assert all(got[export][name][0] == 0 for name in ("idle_causes", "step_idle", "lines")), export


COLUMNS = {
    "ints": np.array([1, 2, 3]), "int32": np.array([1, 2, 3], dtype=np.int32), "floats_nan": np.array([1.5, np.nan, 2]),
    "flags": np.array([True, False, True]), "text": np.array(["a", "b", "c"], dtype=object),
    "text_none": np.array(["a", None, "c"], dtype=object), "text_nan": np.array(["a", np.nan, "c"], dtype=object),
    "mixed": np.array([1, "a", None], dtype=object), "ints_object": np.array([1, 2, 3], dtype=object),
    "none": np.array([None, None, None], dtype=object), "unicode": np.array(["x", "y", "z"])}


@pytest.mark.parametrize("name", sorted(COLUMNS))
def test_arrow_table_equals_the_frame_route(name: str) -> None:
    """arrow_table(columns) is to_arrow(DataFrame(columns)) without the frame, column kind by kind."""
    from hpcprof.run.results import arrow_table, to_arrow

    values = COLUMNS[name]
    for rows in (values, values[:0]):                      # and no rows: a frame's types of no rows
        expected = to_arrow(pd.DataFrame({"c": rows}), pandas_metadata=False)
        got = arrow_table({"c": rows})
        assert got.schema.equals(expected.schema) and got.equals(expected), (got.schema, expected.schema)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fixture_files import materialize

    with tempfile.TemporaryDirectory() as tmp:
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(collected(materialize(Path(tmp))), indent=0, sort_keys=True) + "\n")
