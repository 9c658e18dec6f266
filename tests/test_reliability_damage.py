"""Damaged run files: a rank file that cannot be read is a Problem that makes the run
partial (exit 3), whatever the cause; collect's own damaged cache is made again; a finished run
with a garbage exit code is FAILED; one run's damaged files never hide the healthy runs."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from hpcprof_cli import hpcprof
from reliability_util import experiment, ok, one_line_error, runs

from hpcprof.collect import rank_files
from hpcprof.core.errors import Problem, WorkerDied
from hpcprof.run.results import read_table

SWEEP = "sweep:\n  env.A: [x, y]\n"


@pytest.fixture
def nsys_run(tmp_path: Path, fixtures_dir: Path) -> Path:
    """A finished local run turned into an nsys run with the two H200 rank exports."""
    ok(hpcprof("submit", str(experiment(tmp_path / "e.yaml", ["true"])), "--wait", cwd=tmp_path))
    [run] = runs(tmp_path / "hpcprof-runs")
    config = json.loads((run / "config.json").read_text())
    config["experiment"]["profile"]["tool"] = "nsys"
    config["world_size"] = 2                        # the two ranks whose exports are copied in
    (run / "config.json").write_text(json.dumps(config))
    (run / "profiles" / "nsys").mkdir(parents=True)
    for rank in (0, 1):
        shutil.copyfile(fixtures_dir / "nsys" / "h200_seqpar_bf16" / f"rank{rank}.sqlite",
                        run / "profiles" / "nsys" / f"rank{rank}.sqlite")
    return run


def collect_status(run: Path) -> tuple[str, str]:
    with sqlite3.connect(run.parents[1] / "hpcprof.db") as conn:
        return conn.execute("SELECT collect_status, collect_note FROM runs").fetchone()


def test_every_unreadable_rank_file_is_a_problem(tmp_path: Path) -> None:
    (tmp_path / "rank0.sqlite").write_bytes(b"x")
    (tmp_path / "rank1.sqlite").mkdir()
    (tmp_path / "rank2.sqlite").symlink_to("rank2.sqlite")
    (tmp_path / "rank3.sqlite").symlink_to("gone")
    (tmp_path / "notes.txt").write_text("not a rank file")
    problems: list[Problem] = []
    assert rank_files(tmp_path, problems.append) == {str(tmp_path / "rank0.sqlite"): 0}
    assert [p.path.name for p in problems] == ["rank1.sqlite", "rank2.sqlite", "rank3.sqlite"]
    assert "not a regular file" in problems[0].reason and "symbolic links" in problems[1].reason
    assert isinstance(WorkerDied(tmp_path), Problem)


@pytest.mark.parametrize("how", ["a directory", "nsys export fails"])
def test_a_rank_not_read_makes_the_run_partial(nsys_run: Path, how: str) -> None:
    work = nsys_run.parents[2]
    profiles = nsys_run / "profiles" / "nsys"
    (profiles / "rank1.sqlite").unlink()
    if how == "a directory":
        (profiles / "rank1.sqlite").mkdir()
    else:
        (profiles / "rank1.nsys-rep").write_bytes(b"report")
        failing = work / "nsys"
        failing.write_text("#!/bin/sh\necho 'Importer error: bad report' >&2\nexit 1\n")
        failing.chmod(0o755)
        config = json.loads((nsys_run / "config.json").read_text())
        config["site"]["paths"]["nsys"] = str(failing)
        (nsys_run / "config.json").write_text(json.dumps(config))
    result = hpcprof("collect", cwd=work)
    assert result.returncode == 3, result.stderr
    status, note = collect_status(nsys_run)
    assert status == "partial" and "rank1" in note
    assert "Importer error: bad report" in note if how != "a directory" else "not a regular file" in note
    assert read_table(nsys_run, "nsys_cuda_gpu_kern_sum")["rank"].unique().tolist() == [0]
    assert not [p for p in (nsys_run / "derived").rglob("*.sqlite") if p.is_file()]  # a failed export leaves no file


@pytest.mark.slow
def test_a_damaged_cached_part_is_made_again(nsys_run: Path) -> None:
    work = nsys_run.parents[2]
    ok(hpcprof("collect", cwd=work))
    expected = read_table(nsys_run, "nsys_cuda_gpu_kern_sum")
    parts = sorted((nsys_run / "derived" / "nsys" / "parts").glob("*.arrow"))      # one bundle per rank file
    parts[0].write_bytes(parts[0].read_bytes()[:100])          # truncated: its footer is gone
    data = parts[1].read_bytes()                                 # garbage inside, the footer intact
    parts[1].write_bytes(data[:4] + b"\x00" * (len(data) // 2 - 4) + data[len(data) // 2:])
    ok(hpcprof("collect", nsys_run.name, cwd=work))  # named: collected again (an unnamed collect skips it)
    ok(hpcprof("collect", nsys_run.name, cwd=work))
    assert read_table(nsys_run, "nsys_cuda_gpu_kern_sum").equals(expected)
    assert collect_status(nsys_run)[0] == "complete"


def test_a_finished_run_with_a_garbage_exit_code_is_failed_and_collected(tmp_path: Path) -> None:
    ok(hpcprof("submit", str(experiment(tmp_path / "e.yaml", ["true"])), "--wait", cwd=tmp_path))
    [run] = runs(tmp_path / "hpcprof-runs")
    (run / "status").write_text((run / "status").read_text().replace("exit_code=0", "exit_code=0x"))
    (run / "state.stored").unlink()
    [row] = json.loads(ok(hpcprof("status", "--format", "json", cwd=tmp_path)).stdout)
    assert row["state"] == "FAILED" and row["exit_code"] is None and "exit_code='0x'" in row["reason"]
    collected = ok(hpcprof("collect", cwd=tmp_path))
    assert "not collected yet" not in collected.stderr


@pytest.mark.slow
@pytest.mark.parametrize("file, data", [("config.json", b"{bad"), ("config.json", b"{}"),
                                        ("config.json", b"\xff\xfe"), ("status", b"exit_code=\xff\n")])
def test_one_damaged_run_never_hides_the_others(tmp_path: Path, file: str, data: bytes) -> None:
    ok(hpcprof("submit", str(experiment(tmp_path / "e.yaml", ["true"], SWEEP)), "--wait", cwd=tmp_path))
    first, second = runs(tmp_path / "hpcprof-runs")
    ok(hpcprof("collect", cwd=tmp_path))
    (first / file).write_bytes(data)
    for args in (["status", "--format", "json"], ["report"], ["compare", "--format", "json"]):
        result = ok(hpcprof(*args, cwd=tmp_path))
        assert second.name in result.stdout, (args, result.stdout)
        if file == "config.json" or args[0] != "compare":  # compare shows no reasons: the run is FAILED there
            assert str(first / file) in " ".join((result.stdout + result.stderr).split()), (args, result.stderr)
    if file == "config.json":
        ok(hpcprof("resubmit", second.name.rsplit("-p", 1)[0], cwd=tmp_path))
        assert len(runs(tmp_path / "hpcprof-runs")) == 3  # the healthy point resubmitted
        one_line_error(hpcprof("resubmit", first.name, cwd=tmp_path), str(first / "config.json"))


def test_a_damaged_state_note_is_written_again(tmp_path: Path) -> None:
    ok(hpcprof("submit", str(experiment(tmp_path / "e.yaml", ["true"])), "--wait", cwd=tmp_path))
    [run] = runs(tmp_path / "hpcprof-runs")
    (run / "state.stored").write_bytes(b"\xff\xfe")
    [row] = json.loads(ok(hpcprof("status", "--format", "json", cwd=tmp_path)).stdout)
    # the note is "STATE EXIT" and, on its second line, the reason (hpcprof.campaign.jobstate)
    assert row["state"] == "COMPLETED" and (run / "state.stored").read_text().splitlines()[0] == "COMPLETED 0"


def test_cancel_goes_on_past_a_damaged_submission(tmp_path: Path) -> None:
    ok(hpcprof("submit", str(experiment(tmp_path / "e.yaml", ["true"], SWEEP)), "--wait", cwd=tmp_path))
    first, second = runs(tmp_path / "hpcprof-runs")
    (first / "submission.json").write_bytes(b"\x00garbage")
    result = hpcprof("cancel", first.name, second.name, cwd=tmp_path)
    line = one_line_error(result, "1 of 2", first.name, "submission.json")
    assert f"{second.name}: cancel requested, now COMPLETED" in result.stderr and second.name not in line
