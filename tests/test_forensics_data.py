"""Forensics records and steps files are data: every field checked, another rank's or another job's
record refused in one line, names in ASCII digits without a leading zero, bounded and streaming
reads, a file that grows while read, a re-collect that sees changed inputs. Files forged in a
temporary directory; the real commands on a real run are benchmarks/reliability.py's `data`
group (tests/test_reliability_data.py)."""

from __future__ import annotations

import json
import os
import pickle
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from hpcprof.analysis.forensics.checks import Job, RecordError, check_entry, check_plain, group_ranks
from hpcprof.analysis.forensics.dumps import analyse_dumps, read_dumps
from hpcprof.analysis.forensics.ranks import read_ranks
from hpcprof.analysis.forensics.verdict import cached_analysis, vanished_text
from hpcprof.analysis.steps import read_rank, steps_tables
from hpcprof.cli.collect import changed_since
from hpcprof.run.ranks import rank_in_name
from hpcprof.run.rundir import RunDir

START = 1_800_000_000.0
JOB = Job(2, START, START + 60)


def entry(seq: int, sizes: Any = None, **fields: Any) -> dict[str, Any]:
    return {"process_group": ("0", "default_pg"), "collective_seq_id": seq, "profiling_name": "gloo:all_reduce",
            "input_sizes": [[4]] if sizes is None else sizes, "retired": True,
            "time_created_ns": int((START + 1) * 1e9), **fields}


def write_dump(path: Path, rank: int, entries: list[dict[str, Any]], **note: Any) -> None:
    path.write_bytes(pickle.dumps({
        "version": "2.10", "pg_config": {"0": {"desc": "default_pg", "ranks": "[0, 1]"}}, "entries": entries,
        "hpcprof": {"rank": rank, "time_ns": int((START + 2) * 1e9), "reason": "test", **note}}))


def test_rank_names_are_ascii_digits_without_a_leading_zero() -> None:
    assert rank_in_name("fr_rank12", "fr_rank") == 12 and rank_in_name("rank0.jsonl", "rank", ".jsonl") == 0
    for name in ("fr_rank\u0661", "fr_rank01", "fr_rank", "fr_rank-1", "fr_rank1x", "fr_rank\uff11"):
        assert rank_in_name(name, "fr_rank") is None, name


def test_values_are_bounded_before_they_are_used() -> None:
    shared: Any = [1]
    for _ in range(10):        # 100^10 values reached through 10 shared lists
        shared = [shared] * 100
    with pytest.raises(RecordError, match="more than 4,000,000 values"):
        check_plain(shared)
    deep: Any = 1
    for _ in range(100):
        deep = [deep]
    with pytest.raises(RecordError, match="nested more than 32 deep"):
        check_plain(deep)
    with pytest.raises(RecordError, match="a value of type"):
        check_plain({"x": object()})
    started = time.monotonic()
    with pytest.raises(RecordError, match="a text of 25,888,890 characters, more ranks than the world holds"):
        group_ranks({"ranks": str(list(range(3_000_000)))}, "0", Job(2))
    assert time.monotonic() - started < 5
    with pytest.raises(RecordError, match="outside the world of 2"):
        group_ranks({"ranks": "[0, 5]"}, "0", Job(2))


@pytest.mark.parametrize(("fields", "said"), [
    ({"collective_seq_id": True}, "collective_seq_id is True"),
    ({"collective_seq_id": "7"}, "collective_seq_id is '7'"),
    ({"collective_seq_id": -1}, "collective_seq_id is -1"),
    ({"input_sizes": "[[4]]"}, "input_sizes is '[[4]]'"),
    ({"input_sizes": [[-4]]}, "input_sizes"),
    ({"process_group": ("0",)}, "process_group"),
    ({"retired": "yes"}, "retired is 'yes'"),
    ({"time_created_ns": float("nan")}, "time_created_ns"),
])
def test_each_field_of_a_collective_is_checked(fields: dict[str, Any], said: str) -> None:
    with pytest.raises(RecordError, match=f"entries\\[3\\]\\.{said.split()[0]}"):
        check_entry(entry(1, **fields), 3)
    assert said.split()[0] in str(pytest.raises(RecordError, check_entry, entry(1, **fields), 3).value)


def test_dumps_of_another_rank_another_job_or_outside_the_world_are_refused(tmp_path: Path) -> None:
    write_dump(tmp_path / "fr_rank0", 0, [entry(1)], pid=10)
    write_dump(tmp_path / "fr_rank1", 0, [entry(1)])                                     # rank 0's, in rank 1's file
    found, problems = read_dumps(tmp_path, JOB, {0: 10})
    assert list(found["fr"]) == [0] and problems == [f"{tmp_path}/fr_rank1: refused (a dump of rank 0 in rank 1's file)"]
    for name, rank, note, said in [
            ("fr_rank1", 1, {"time_ns": int((START - 86400) * 1e9)}, "dumped -86,400 s from the job's start"),
            ("fr_rank1", 1, {"pid": 99}, "not rank 1's process (pid 7)"),
            ("fr_rank5", 5, {}, "names rank 5, outside the world of 2 ranks"),
            ("fr_rank01", 1, {}, "not named <family>_rank<N>"),
            ("fr_rank\u0661", 1, {}, "not named <family>_rank<N>")]:
        for path in tmp_path.glob("fr_rank*"):
            path.unlink()
        write_dump(tmp_path / name, rank, [entry(1)], **note)
        found, problems = read_dumps(tmp_path, JOB, {1: 7})
        assert not found and len(problems) == 1 and said in problems[0], (name, problems)


def test_many_unreadable_dumps_are_one_line_and_a_huge_sequence_number_no_loop(tmp_path: Path) -> None:
    for rank in range(2, 500):
        (tmp_path / f"fr_rank{rank}").write_bytes(b"junk")
    found, problems = read_dumps(tmp_path, JOB)
    assert not found and len(problems) == 1 and problems[0].startswith(f"498 dumps in {tmp_path} not read or refused")
    for path in tmp_path.iterdir():
        path.unlink()
    write_dump(tmp_path / "fr_rank0", 0, [entry(1), entry(10 ** 12, [[2]])])
    write_dump(tmp_path / "fr_rank1", 1, [entry(1)])
    started = time.monotonic()
    record = analyse_dumps(tmp_path, use_torch=False, job=JOB)
    assert time.monotonic() - started < 5 and not record.problems
    assert [(f.seq, f.kind, f.missing) for f in record.findings] == [(10 ** 12, "missing", [1])]


def exception(rank: int, **fields: Any) -> str:
    return json.dumps({"rank": rank, "pid": 7, "host": "h", "time": START + 3, "type": "ValueError",
                       "message": "bad batch", "frames": [["/x/train.py", 3, "main"]], **fields})


@pytest.mark.parametrize(("files", "said"), [
    ({"exception_rank1.json": exception(0)}, "a record of rank 0 in rank 1's file"),
    ({"exception_rank1.json": exception(1, time=START - 86400)}, "raised -86,400 s from the job's start"),
    ({"exception_rank1.json": exception(1, time=START + 7200)}, "after the job's end"),
    ({"exception_rank1.json": exception(1, pid=99)}, "raised by pid 99, not rank 1's process (pid 7)"),
    ({"exception_rank1.json": exception(1, type="[bold]x")}, "not the name of an exception type"),
    ({"exception_rank1.json": exception(1, frames=[["f", "x", "g"]])}, "frames[0] line"),
    ({"exception_rank1.json": exception(1, time=float("inf"))}, "time is inf"),
    ({"exception_rank5.json": exception(5)}, "rank 5 is outside the world of 2 ranks"),
    ({"exception_rank01.json": exception(1)}, "not named for a rank"),
    ({"stacks_rank1.txt": f"# hpcprof: rank 0 pid 7 host h started {START + 1}\n"}, "process line of rank 0"),
    ({"stacks_rank1.txt": f"# hpcprof: rank 1 pid 7 host h started {START - 7200}\n"}, "another job's record"),
])
def test_records_of_another_rank_job_or_process_are_refused(tmp_path: Path, files: dict[str, str], said: str) -> None:
    (tmp_path / "forensics").mkdir()
    (tmp_path / "forensics" / "stacks_rank1.txt").write_text(f"# hpcprof: rank 1 pid 7 host h started {START + 1}\n")
    for name, text in files.items():
        (tmp_path / "forensics" / name).write_text(text)
    ranks, _, problems = read_ranks(tmp_path, 2, JOB)
    assert len(problems) == 1 and said in problems[0] and "refused" in problems[0], problems
    assert ranks[1].exception is None


def test_a_good_exception_record_is_read(tmp_path: Path) -> None:
    (tmp_path / "forensics").mkdir()
    (tmp_path / "forensics" / "stacks_rank1.txt").write_text(f"# hpcprof: rank 1 pid 7 host h started {START + 1}\n")
    (tmp_path / "forensics" / "exception_rank1.json").write_text(exception(1))
    ranks, _, problems = read_ranks(tmp_path, 2, JOB)
    assert not problems and ranks[1].error() == "ValueError: bad batch" and ranks[1].process["pid"] == 7


def test_a_rank_that_vanished_is_named_after_the_job_s_exit_code() -> None:
    assert "os._exit" in vanished_text("3") and "signal" not in vanished_text("3")
    assert vanished_text("137") == "was killed by SIGKILL (signal 9) without a Python error"
    assert "such as SIGKILL" in vanished_text("")


def test_status_never_writes_its_cache_through_a_derived_link(tmp_path: Path) -> None:
    run, outside = tmp_path / "run", tmp_path / "outside"
    (run / "forensics").mkdir(parents=True)
    outside.mkdir()
    (run / "derived").symlink_to(outside)
    cached_analysis(RunDir(run), "FAILED")
    assert not any(outside.iterdir())
    (run / "derived").unlink()
    (run / "derived").mkdir()
    cached_analysis(RunDir(run), "FAILED")
    assert (run / "derived" / "forensics.json").is_file()


HEADER = '{"rank":0,"pid":1,"host":"h","tool":"none","skip":1,"steps":3}\n'


def test_each_steps_line_is_checked_and_the_drops_summed_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "rank0.jsonl"
    path.write_text(HEADER + '{"step":1,"end_ns":10,"ns":null}\n{"step":2,"end_ns":20,"ns":10}\n'
                    '{"step":3,"end_ns":30,"ns":NaN}\n{"step":3,"end_ns":30,"ns":Infinity}\n'
                    '{"step":3,"end_ns":30,"ns":-5}\n{"step":3,"end_ns":30,"ns":"10"}\n{"step":3,"end_ns":30,"ns":1.5}\n'
                    '{"step":-1,"end_ns":30,"ns":5}\n{"step":1e30,"end_ns":30,"ns":5}\n{"step":2,"end_ns":20,"ns":10}\n'
                    '{"step":3,"ns":5}\n{"step":4,"end_ns":40,"ns":null}\n' + "[" * 3000 + "\n"
                    + "x" * 10_000 + '\n{"step":3,"end_ns":30,"ns":10}\n')
    rows, line = read_rank(path, 0)
    assert [(r["step"], r["duration_ns"], r["in_window"]) for r in rows] == [(1, None, False), (2, 10, True), (3, 10, True)]
    assert line is not None and line.startswith(f"{path}: 3 steps read; left out: ")
    for said in ("2 lines: duration NaN or infinite",
                 "1 line: duration negative", "1 line: duration text", "1 line: duration fractional",
                 "1 line: step number negative", "1 line: step number not an integer", "1 line: a step number seen before",
                 "1 line: end time missing", "1 line: no duration after step 1", "1 line: not JSON",
                 "1 line: longer than 4,096 bytes"):
        assert said in line, (said, line)


def test_a_header_of_another_rank_stray_copies_and_ranks_outside_the_world(tmp_path: Path) -> None:
    steps = tmp_path / "steps"
    steps.mkdir()
    good = HEADER + '{"step":1,"end_ns":10,"ns":null}\n{"step":2,"end_ns":20,"ns":10}\n'
    (steps / "rank0.jsonl").write_text(good)
    (steps / "rank1.jsonl").write_text(good)                                       # rank 0's header
    (steps / "rank0 (copy).jsonl").write_text(good)
    (steps / "rank00.jsonl").write_text(good)
    (steps / "rank7.jsonl").write_text(good.replace('"rank":0', '"rank":7'))
    tables, problems = steps_tables(tmp_path, world=2)
    assert sorted(set(tables["times"]["rank"])) == [0] and len(problems) == 4
    stray = "not read (not a rank's file (rank<R>.jsonl: R in ASCII digits, no leading zero))"
    assert [p.removeprefix(f"{steps}/") for p in problems] == [
        f"rank0 (copy).jsonl: {stray}", f"rank00.jsonl: {stray}",
        "rank1.jsonl: skipped (rank1.jsonl: its header names rank 0: another rank's file)",
        "rank7.jsonl: not read (rank 7 is outside the world of 2 ranks)"]


def test_a_long_line_without_newline_is_never_held_whole(tmp_path: Path) -> None:
    path = tmp_path / "rank0.jsonl"
    path.write_text(HEADER + '{"step":1,"end_ns":10,"ns":null}\n')
    with open(path, "a") as fh:
        fh.truncate(path.stat().st_size + (64 << 20))       # 64 MiB of NULs, no newline
    tracemalloc.start()
    rows, line = read_rank(path, 0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(rows) == 1 and line is not None and "cut short at the end of the file" in line
    assert peak < 8 << 20, peak


@pytest.mark.slow
def test_a_steps_file_that_grows_while_read_is_read_up_to_its_size_at_the_start(tmp_path: Path) -> None:
    path = tmp_path / "rank0.jsonl"
    lines = 200_000
    path.write_text(HEADER + '{"step":1,"end_ns":10,"ns":null}\n' +
                    "".join(f'{{"step":{n},"end_ns":{n},"ns":1}}\n' for n in range(2, lines + 1)))
    stop = threading.Event()

    def grow() -> None:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        step = lines
        while not stop.is_set():
            step += 1
            os.write(fd, f'{{"step":{step},"end_ns":{step},"ns":1}}\n'.encode())
        os.close(fd)

    writer = threading.Thread(target=grow)
    writer.start()
    try:
        time.sleep(0.01)
        rows, line = read_rank(path, 0)
    finally:
        stop.set()
        writer.join()
    assert line is not None and "written while it was read not read (read up to its" in line
    assert len(rows) >= lines and rows[-1]["step"] == len(rows)


def test_a_changed_steps_file_or_dump_is_collected_again(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    for sub in ("steps", "forensics", "profiles/nsys"):
        (tmp_path / sub).mkdir(parents=True)
        (tmp_path / sub / "f").write_text("x")
    written = time.time() + 1
    assert not changed_since(run, written)
    for sub in ("steps", "forensics", "profiles/nsys"):
        os.utime(tmp_path / sub / "f", (0, 0))          # an old modification time: its change time is now
        assert changed_since(run, written - 2), sub
