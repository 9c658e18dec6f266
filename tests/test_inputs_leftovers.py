"""Inputs that other tools let through in silence: ranks' host clocks far apart in the steps files,
steps files numbered from 1, one run id in two experiments, a store on a full disk. The real
commands on a real run are benchmarks/reliability.py's `data` group (tests/test_reliability_data.py)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from hpcprof_cli import hpcprof

from hpcprof.analysis.clocks import host_skew
from hpcprof.analysis.steps import steps_tables

S = 1_000_000_000
HEADER = {"pid": 11, "host": "h", "tool": "none", "skip": 1, "steps": 3}


def write_steps(steps: Path, rank: int, ends: list[int], name: str | None = None) -> None:
    steps.mkdir(exist_ok=True)
    lines = [json.dumps({**HEADER, "rank": rank})]
    lines += [json.dumps({"step": n, "end_ns": end, "ns": None if n == 1 else 10 ** 8}) for n, end in enumerate(ends, 1)]
    (steps / (name or f"rank{rank}.jsonl")).write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(("off_s", "said"), [(100, "rank 1's clock is 100.0 s ahead of rank 0's"),
                                             (-3600, "rank 1's clock is 3,600.0 s behind rank 0's")])
def test_a_rank_s_host_clock_off_is_named_in_one_line(tmp_path: Path, off_s: int, said: str) -> None:
    ends = [1_800_000_000 * S + n * S // 10 for n in range(1, 6)]
    write_steps(tmp_path / "steps", 0, ends)
    write_steps(tmp_path / "steps", 1, [e + off_s * S + 3_000_000 for e in ends])    # 3 ms of a step's jitter
    tables, problems = steps_tables(tmp_path, world=2)
    assert sorted(set(tables["times"]["rank"])) == [0, 1]
    assert problems == [f"clocks: {said} (from the ends of the steps they share, which end together): wall-clock "
                        "times of different ranks are not comparable; durations, each on its rank's own clock, are"]


def test_clocks_within_a_second_or_ranks_that_drift_apart_are_no_skew() -> None:
    step = np.array([1, 2, 3, 4] * 2)
    rank = np.repeat([0, 1], 4)
    ends = np.array([10, 20, 30, 40], dtype=np.int64) * S
    assert host_skew(rank, step, np.concatenate([ends, ends + S // 2]), "steps") is None
    # rank 1 steps on its own, slower and slower: 2 s, 10 s, 30 s, 60 s behind: not a clock's offset
    assert host_skew(rank, step, np.concatenate([ends, ends + np.array([2, 10, 30, 60]) * S]), "steps") is None
    # a rank sharing no step with rank 0 is not compared
    assert host_skew(rank, step + rank * 10, np.concatenate([ends, ends + 100 * S]), "steps") is None


def test_steps_files_numbered_from_one_are_one_line(tmp_path: Path) -> None:
    ends = [1_800_000_000 * S + n * S for n in range(1, 4)]
    for rank in (1, 2):
        write_steps(tmp_path / "steps", rank, ends)
    tables, problems = steps_tables(tmp_path, world=2)
    assert sorted(set(tables["times"]["rank"])) == [1]
    assert problems == [f"{tmp_path / 'steps'}: the steps files are numbered from 1 (rank1-rank2) for a world of 2 "
                        "ranks, which count from 0 as MPI's do: rank2.jsonl not read (outside the world), rank 0 has "
                        "no file"]


def submitted(work: Path) -> Path:
    """A finished local run of `true` under `work`/hpcprof-runs (in the workdir's store): its directory."""
    (work / "e.yaml").write_text('name: t\nworkload:\n  kind: command\n  argv: ["true"]\n')
    hpcprof("submit", "e.yaml", "--site", "local", "--wait", cwd=work, check=True)
    [run] = [p.parent for p in (work / "hpcprof-runs").glob("*/*/config.json")]
    return run


def test_one_run_id_in_two_experiments_is_one_line(tmp_path: Path) -> None:
    run = submitted(tmp_path)
    shutil.copytree(run, tmp_path / "hpcprof-runs" / "other" / run.name)
    for command in ("status", "collect"):
        result = hpcprof(command, cwd=tmp_path)
        said = [line for line in result.stderr.splitlines() if f"run id {run.name} is in 2 experiments" in line]
        assert len(said) == 1 and f"{run} is used" in said[0] and "Traceback" not in result.stderr, result.stderr


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="mounts a tmpfs: needs root")
def test_a_store_on_a_full_disk_is_one_line_and_left_unchanged(tmp_path: Path) -> None:
    run = submitted(tmp_path)
    write_steps(run / "steps", 0, [1_800_000_000 * S + n * S for n in range(1, 4)])
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        with closing(sqlite3.connect(tmp_path / "hpcprof-runs" / "hpcprof.db")) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        store = disk / "s.db"
        shutil.copyfile(tmp_path / "hpcprof-runs" / "hpcprof.db", store)
        before = store.read_bytes()
        with open(disk / "fill", "wb", buffering=0) as fh, pytest.raises(OSError):
            while True:
                fh.write(b"\0" * 1024)
        result = hpcprof("collect", "--db", f"sqlite:///{store}", cwd=tmp_path)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.splitlines() == [
            f"Error: --db {store}: cannot be read (disk I/O error; 0 bytes free on its disk); free space there, or give "
            "another --db or --workdir"]
        assert store.read_bytes() == before
        (disk / "fill").unlink()                     # space again: the same store takes the collect
        assert hpcprof("collect", "--db", f"sqlite:///{store}", cwd=tmp_path).returncode == 0
        with closing(sqlite3.connect(store)) as conn:
            assert conn.execute("SELECT value FROM run_metrics WHERE metric = 'window.iterations'").fetchone() == (2.0,)
    finally:
        subprocess.run(["umount", str(disk)], check=False)


#: what the failing program raises, and how an ASCII stream shows it
RAISED, SHOWN = "\u00b5s \u2192 \u00d7 \u00e9 \u4e2d", "us -> x e \\u4e2d"


@pytest.mark.slow
def test_an_ascii_stream_gets_every_command_s_text_in_ascii(tmp_path: Path) -> None:
    """status, report and logs --hang under PYTHONIOENCODING=ascii: no UnicodeEncodeError, every byte
    ASCII, the program's message with its stand-ins (no `?`, no UTF-8 bytes, no escapes of µ and →),
    tables (status's, logs --hang's; report's of a failed run has none) drawn in ASCII, aligned."""
    (tmp_path / "e.yaml").write_text("name: t\nworkload:\n  kind: command\n  argv: " + json.dumps(
        ["python", "-c", f"raise ValueError({RAISED!r})"]) + "\n")
    hpcprof("submit", "e.yaml", "--site", "local", "--wait", cwd=tmp_path)
    [run] = [p.parent for p in (tmp_path / "hpcprof-runs").glob("*/*/config.json")]
    for args, tables in ((["status"], True), (["report"], False), (["logs", run.name, "--hang"], True)):
        result = subprocess.run([sys.executable, "-m", "hpcprof", *args], cwd=tmp_path, capture_output=True,
                                env={**os.environ, "PYTHONIOENCODING": "ascii"}, timeout=120)
        out = result.stdout + result.stderr
        assert result.returncode == 0 and b"Traceback" not in result.stderr and b"UnicodeEncodeError" not in out, out
        assert out.isascii() and SHOWN.encode() in out and b"\\xb5" not in out, (args, out)
        table = [line for line in result.stdout.decode().splitlines() if line.startswith(("+", "|"))]
        assert not tables or (table and len({len(line) for line in table}) == 1), (args, table)


def test_the_ascii_stand_ins() -> None:
    from hpcprof.core.safe_text import stand_in

    assert [stand_in(c) for c in "\u250f\u2501\u2533\u2503\u2502\u2547\u2514\u2500"] == list("+-+||++-")
    assert [stand_in(c) for c in "\u00b5\u00d7\u2192\u00e9\u00b3\u20ac"] == ["u", "x", "->", "e", "^3", "\\u20ac"]


def test_sizes_from_refuses_an_alias_bomb_before_expanding_it(tmp_path: Path) -> None:
    """bench ceilings --sizes-from reads YAML through the bounded loader config files use
    (hpcprof.core.safe_yaml): 9^9 values under the workload's args are refused in one line, in well under
    a second; a file whose aliases expand to little loads as before."""
    import time

    from hpcprof.core.errors import UserError
    from hpcprof.workloads.ceiling_specs import sizes_from

    lines = ["      a: &a [" + ", ".join(["lol"] * 9) + "]"]
    lines += [f"      {n}: &{n} [" + ", ".join([f"*{p}"] * 9) + "]" for p, n in zip("abcdefgh", "bcdefghi", strict=True)]
    head = "name: t\nworkload:\n  kind: seqpar\n  args:\n    sequence_length: 64\n"
    (tmp_path / "bomb.yaml").write_text(head + "    bomb:\n" + "\n".join(lines) + "\n")
    started = time.perf_counter()
    with pytest.raises(UserError, match=r"line 12: its aliases expand to more than 100,000 values"):
        sizes_from(tmp_path / "bomb.yaml")
    assert time.perf_counter() - started < 1.0
    (tmp_path / "small.yaml").write_text(head + "    hidden_dim: &h 128\n    other: *h\n"
                                         "resources:\n  nodes: 2\n  ranks_per_node: 4\n")
    assert sizes_from(tmp_path / "small.yaml") == ("seqpar", {"sequence_length": 64, "hidden_dim": 128, "other": 128}, 8)
