"""The run record (hpcprof.run.record): config.json read back once, typed and versioned. A run written
before the record had a version (the committed 2x H200 campaign) still reads; a rendered run writes
`format`/`version` and reads back what was rendered; a record that cannot be read is one line
naming the file, with the messages it had before the record was typed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fixture_files import STORED
from hpcprof_cli import hpcprof
from reliability_util import one_line_error

from hpcprof.run.record import ResolvedRun, RunRecord, read_record
from hpcprof.run.rundir import RECORD_FORMAT, RECORD_VERSION, DamagedRunFile, RunDir

#: a run of the committed campaign, written by hpcprof before the record was versioned
OLD_RUN = STORED / "gpu" / "h200_window_campaign" / "window-seqpar" / "20261122-234202-18a6d5-p002"


def test_a_run_written_before_the_record_had_a_version_reads() -> None:
    raw = json.loads((OLD_RUN / "config.json").read_text())
    assert "format" not in raw and "version" not in raw and "analysis" not in raw["experiment"]
    record = read_record(RunDir(OLD_RUN))
    assert (record.format, record.version, record.run_id) == ("", 0, OLD_RUN.name)
    assert (record.kind, record.tool, record.world_size, record.ranks_per_node) == ("seqpar", "nsys", 2, 2)
    assert record.experiment.name == "window-seqpar" and record.experiment.resources.nodes == 1
    assert record.experiment.workload.args["precision"] == "bfloat16"
    assert record.experiment.profile.nsys.capture_range == "cudaProfilerApi"
    assert record.experiment.profile.window.nvtx is None
    assert record.experiment.analysis.slowdown_match == "hpcprof"     # the default of a run without the block
    assert (record.site.name, record.site.paths.nsys, record.site.peaks) == ("h200x2", "nsys", None)
    assert record.sweep_point.params == {"workload.args.precision": "bfloat16", "repeat": 0}
    assert record.walltime == "00:10:00" and record.resubmit_of is None
    resolved = read_record(OLD_RUN / "config.json", ResolvedRun)      # what resubmit renders again: whole
    assert resolved.experiment == raw["experiment"] and resolved.site == raw["site"]


def test_a_rendered_run_writes_a_versioned_record_and_reads_it_back(repo: Path, tmp_path: Path) -> None:
    hpcprof("render", str(repo / "examples" / "seqpar_polaris.yaml"), "--site", "polaris", "--set",
            "resources.account=PROJECT", "--set", "sweep={}", "--set", "resources.nodes=2", "--set",
            "profile.window.nvtx=timed", "-o", "r", cwd=tmp_path, check=True)
    raw = json.loads((tmp_path / "r" / "config.json").read_text())
    assert (raw["format"], raw["version"]) == (RECORD_FORMAT, RECORD_VERSION) == ("hpcprof.run", 1)
    record = read_record(tmp_path / "r" / "config.json")
    assert isinstance(record, RunRecord) and (record.format, record.version) == ("hpcprof.run", 1)
    assert (record.kind, record.tool, record.experiment.resources.nodes) == ("seqpar", "nsys", 2)
    assert record.world_size == 2 * record.ranks_per_node == raw["world_size"]
    assert record.experiment.profile.window.nvtx == "timed" and record.site.name == "polaris"
    assert record.walltime == raw["walltime"] and record.submit_dir == raw["submit_dir"]


def write_config(run: Path, change: dict[str, object] | None = None, text: bytes | None = None) -> Path:
    """A copy of OLD_RUN's config.json in `run` with top-level keys changed, or `text` instead."""
    run.mkdir(parents=True, exist_ok=True)
    data = {**json.loads((OLD_RUN / "config.json").read_text()), **(change or {})}
    (run / "config.json").write_bytes(text if text is not None else json.dumps(data).encode())
    return run / "config.json"


@pytest.mark.parametrize("change, text, reason", [
    (None, b"{bad", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    (None, b"\xff\xfe", "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
    (None, b"[]", "not a JSON object"),
    (None, b"{}", "no experiment.name"),
    ({"site": None}, None, "no site"),
    ({"sweep_point": []}, None, "no sweep_point"),
    ({"world_size": "two"}, None, "Expected `int`, got `str` - at `world_size`"),
    ({"format": "other.tool"}, None, "format 'other.tool', not 'hpcprof.run'"),
    ({"format": RECORD_FORMAT, "version": RECORD_VERSION + 1}, None,
     f"record version {RECORD_VERSION + 1}: written by a newer hpcprof (this one reads up to {RECORD_VERSION})"),
])
def test_a_record_that_cannot_be_read_is_one_line_naming_the_file(tmp_path: Path, change: dict[str, object] | None,
                                                                  text: bytes | None, reason: str) -> None:
    path = write_config(tmp_path / "run", change, text)
    with pytest.raises(DamagedRunFile) as raised:
        read_record(RunDir(tmp_path / "run"))
    assert raised.value.format_message() == (f"{path}: damaged run file ({reason}); this run cannot be read "
                                             "(move its directory away, or resubmit the experiment)")


def test_a_record_of_the_wrong_type_is_named_by_report_and_left_out(tmp_path: Path) -> None:
    """The typed reading's own errors (a value of the wrong type) reach the user as the key checks'
    do: one line, exit 2, no traceback."""
    work = tmp_path / "work"
    shutil.copytree(OLD_RUN, work / "window-seqpar" / OLD_RUN.name)
    path = write_config(work / "window-seqpar" / OLD_RUN.name, {"world_size": "two"})
    one_line_error(hpcprof("report", OLD_RUN.name, workdir=work, cwd=tmp_path), str(path), "`world_size`")
