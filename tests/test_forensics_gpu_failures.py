"""GPU failures in one sentence, never a traceback: a CUDA out-of-memory error (its sizes read from
PyTorch's message), an illegal memory access, an NCCL error and a rank killed by the kernel's OOM
killer, each from the files the start-up hook and the launcher leave (exception records in
tests/data/gpu_failures/: the hook's format, with the messages PyTorch 2.x writes; made on this
machine, not on a GPU). NCCL's Flight Recorder dumps below hold ranks at different states of the
same all_reduce, which PyTorch's fr_trace calls a mismatch although every rank passed the same."""

from __future__ import annotations

import json
import pickle
import re
import shutil
from pathlib import Path

import pytest
from hpcprof_cli import hpcprof

DATA = Path(__file__).resolve().parent / "data" / "gpu_failures"
STARTED = 1764340000.0
OOM_SENTENCE = ("rank 1 ran out of CUDA memory at `train.py:18 main` (asking 4.00 GiB; 130.5 of 139.8 GiB allocated, "
                "4.0 GiB reserved but free)")


def nccl_entry(seq: int, state: str) -> dict:
    """One entry of NCCL's Flight Recorder as torch's `_dump_nccl_trace` gives it."""
    return {"record_id": seq, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
            "p2p_seq_id": 0, "op_id": seq, "profiling_name": "nccl:all_reduce",
            "time_created_ns": int(STARTED * 1e9) + seq * 10**9, "input_sizes": [[1024]], "input_dtypes": ["Float"],
            "output_sizes": [[1024]], "output_dtypes": ["Float"], "state": state,
            "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
            "retired": state == "completed", "timeout_ms": 600000, "is_p2p": False, "frames": []}


def make_run(cwd: Path, case: str) -> Path:
    """A finished 2-rank run (exit code 1) whose rank 1 failed as `case` says; rank 0 was stopped by the launcher."""
    run = cwd / "hpcprof-runs" / "gpu" / f"gpu-{case}"
    (run / "forensics").mkdir(parents=True)
    (run / "logs").mkdir()
    (run / "config.json").write_text(json.dumps({
        "experiment": {"name": "gpu", "workload": {"kind": "command", "argv": ["python3", "train.py"]},
                       "profile": {"tool": "none", "ranks": "all"}},
        "site": {}, "sweep_point": {}, "ranks_per_node": 2, "world_size": 2, "submit_dir": "/work/job"}))
    (run / "status").write_text(f"start={STARTED:.0f}\nexit_code=1\n")
    (run / "DONE").write_text("")
    for rank in (0, 1):
        (run / "forensics" / f"stacks_rank{rank}.txt").write_text(
            f"# hpcprof: rank {rank} pid {48212 + rank} host gpu01 started {STARTED:.3f}\n")
        (run / "logs" / f"rank{rank}.log").write_text("step 1\nstep 2\n")
    with (run / "forensics" / "stacks_rank0.txt").open("a") as fh:   # the launcher's SIGTERM, in all_reduce
        fh.write('Current thread 0x00007f3a2b1c0740 (most recent call first):\n'
                 '  File "/venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py", line 2862 in all_reduce\n'
                 '  File "/work/job/train.py", line 25 in main\n  File "/work/job/train.py", line 30 in <module>\n\n')
    (run / "logs" / "job.out").write_text("")
    if case == "oom_killer":
        (run / "logs" / "job.out").write_text(
            "===================================================================================\n"
            "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   PID 48213 RUNNING AT gpu01\n"
            "=   EXIT CODE: 9\n=   CLEANING UP REMAINING PROCESSES\n"
            "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)\n")
    else:
        shutil.copy(DATA / f"exception_{case}.json", run / "forensics" / "exception_rank1.json")
    for rank, last in ((0, "completed"), (1, "started")):
        data = {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
                "pg_status": {}, "entries": [nccl_entry(1, "completed"), nccl_entry(2, last)]}
        (run / "forensics" / f"fr_nccl_rank{rank}").write_bytes(pickle.dumps(data))
    return run


@pytest.mark.slow
def test_the_oom_is_one_sentence_in_status_and_report(tmp_path: Path) -> None:
    """`status` and `report` of a run whose rank 1 ran out of CUDA memory, with NCCL dumps whose
    ranks disagree only on a collective's state: the OOM's sentence, no traceback."""
    run = make_run(tmp_path, "oom")
    status = hpcprof("status", "--format", "json", cwd=tmp_path, check=True)
    [row] = json.loads(status.stdout)
    assert row["state"] == "FAILED" and row["reason"] == OOM_SENTENCE, row
    report = hpcprof("report", run.name, cwd=tmp_path, check=True)
    assert "Traceback" not in report.stdout + report.stderr
    assert f"FAILED: {OOM_SENTENCE}" in re.sub(r"\s+", " ", report.stdout), report.stdout


@pytest.mark.slow
def test_a_state_difference_is_no_mismatch(tmp_path: Path) -> None:
    """PyTorch's fr_trace reports all_reduce #2 (completed on rank 0, started on rank 1) as a
    mismatch; every rank passed the same, so it is no finding of either reader."""
    from hpcprof.analysis.forensics.dumps import analyse_dumps

    run = make_run(tmp_path, "oom")
    theirs, ours = (analyse_dumps(run / "forensics", use_torch=use) for use in (True, False))
    assert theirs.engine == "PyTorch fr_trace" and ours.engine == "hpcprof"
    assert theirs.findings == ours.findings == [] and theirs.problems == []


@pytest.mark.parametrize(("case", "said"), [
    ("oom", re.escape(OOM_SENTENCE)),
    ("illegal", r"rank 1 raised torch\.AcceleratorError: CUDA error: an illegal memory access was encountered "
                r"in `train\.py:22 main`"),
    ("nccl", r"rank 1 raised torch\.distributed\.DistBackendError: NCCL error in: .*ProcessGroupNCCL\.cpp:3356, "
             r"unhandled cuda error .* in `train\.py:25 main`"),
    ("oom_killer", r"rank 1 was killed by SIGKILL \(signal 9\) first"),
])
def test_each_gpu_failure_is_one_sentence(tmp_path: Path, case: str, said: str) -> None:
    from hpcprof.analysis.forensics.verdict import analyse
    from hpcprof.run.rundir import RunDir
    from hpcprof.schedulers.base import FAILED

    found = analyse(RunDir(make_run(tmp_path, case)), FAILED)
    assert found.sentence is not None and re.fullmatch(said, found.sentence), found.sentence
    assert [row.rank for row in found.ranks] == [0, 1]


def test_oom_messages_are_read_into_bytes() -> None:
    """PyTorch's format_size units, a message without the process line, another error."""
    from hpcprof.analysis.forensics.oom import parse_oom

    oom = parse_oom("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total "
                    "capacity of 8.00 GiB of which 0 bytes is free. Of the allocated memory 7.51 GiB is allocated "
                    "by PyTorch, and 15.90 MiB is reserved by PyTorch but unallocated.")
    assert oom is not None and (oom.asking, oom.device, oom.capacity, oom.free) == (20 << 20, 0, 8 << 30, 0)
    assert oom.allocated == round(7.51 * (1 << 30)) and oom.reserved_free == round(15.90 * (1 << 20))
    assert oom.text() == "asking 20.00 MiB; 7.5 of 8.0 GiB allocated, 0.0 GiB reserved but free"
    short = parse_oom("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert short is not None and short.text() == "asking 2.00 GiB" and short.capacity is None
    assert parse_oom("RuntimeError: CUDA error: an illegal memory access was encountered") is None


def test_the_oom_snapshot_names_what_held_the_memory(tmp_path: Path) -> None:
    """The snapshot the start-up hook dumps on an OOM (forensics/memory_rank1.pickle: 64 blocks of
    2 GiB from train.py:6, recorded in the history) adds what held the memory to the sentence."""
    from hpcprof.analysis.forensics.verdict import analyse
    from hpcprof.run.rundir import RunDir
    from hpcprof.schedulers.base import FAILED

    run = make_run(tmp_path, "oom")
    frames = [{"filename": "/venv/lib/python3.12/site-packages/torch/nn/functional.py", "line": 9, "name": "gelu"},
              {"filename": "/work/job/train.py", "line": 6, "name": "forward"}]
    blocks = [{"address": (1 << 40) + i * (2 << 30), "size": 2 << 30, "requested_size": 2 << 30,
               "state": "active_allocated", "frames": frames} for i in range(64)]
    trace = [{"action": "alloc", "addr": b["address"], "size": b["size"], "stream": 0, "time_us": i, "frames": frames}
             for i, b in enumerate(blocks)]
    snapshot = {"segments": [{"device": 1, "address": 1 << 40, "total_size": 128 << 30, "stream": 0,
                              "blocks": blocks}], "device_traces": [[], trace]}
    (run / "forensics" / "memory_rank1.pickle").write_bytes(pickle.dumps(snapshot))
    found = analyse(RunDir(run), FAILED)
    assert found.sentence == OOM_SENTENCE + ("; 128.0 GiB were held by `train.py:6 forward` (64 blocks allocated "
                                             "during the history and still held)")
    (run / "forensics" / "memory_rank1.pickle").write_bytes(b"\x80\x04garbage")   # damaged: the sentence without it
    assert analyse(RunDir(run), FAILED).sentence == OOM_SENTENCE
