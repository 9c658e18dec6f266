"""Why a run hung or died: real `hpcprof submit` of a Gloo program with one planted fault
(tests/data/forensics_plant.py, 3 ranks) on the local site (Hydra mpiexec), each named by `status`,
`report`, the HTML report and `hpcprof logs --hang`, nothing else in the run lost; the Flight
Recorder reader against PyTorch's own analyser on the dumps of those runs; the start-up hook and
what render arms (and does not, with `forensics.enabled: false`). The Slurm runs are in
tests/test_forensics_slurm.py."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hpcprof_cli import hpcprof

REPO = Path(__file__).resolve().parents[1]
PLANT = REPO / "tests" / "data" / "forensics_plant.py"
#: name -> the plant's argv (fault, world, Gloo timeout s[, hold s]) and the experiment's extra YAML
FAULTS: dict[str, tuple[list[str], str]] = {
    "hang": (["hang", "3", "3", "10"], ""),
    "mismatch": (["mismatch", "3", "3"], ""),
    "exception": (["exception", "3", "3"], ""),
    "segv": (["segv", "3", "3"], ""),
    # Gloo would wait 10 min; the walltime (60 s) ends it, its warning 25 s before asks for the dumps
    "walltime": (["hang", "3", "600", "3600"], "  walltime: '00:01:00'\nforensics:\n  warning_seconds: 25\n"),
}
#: the state and what status says of each run (a regular expression over the reason)
SAID = {
    "hang": ("FAILED", r"rank 2 never entered all_reduce #6 of the default group \(ranks 0, 1 waited \d+\.\d s, then "
                       r"timed out\); rank 2 was in `forensics_plant\.py:\d+ save_checkpoint`"),
    "mismatch": ("FAILED", r"all_reduce #4 of the default group did not match across ranks: rank 2 passed \[2\] where "
                           r"ranks 0, 1 passed \[4\]; rank 2 was in `forensics_plant\.py:\d+ main`"),
    "exception": ("FAILED", r"rank 1 raised ValueError: planted: bad batch at step 3 in `forensics_plant\.py:\d+ main`"),
    "segv": ("FAILED", r"rank 1 died of SIGSEGV \(Segmentation fault\) in `forensics_plant\.py:\d+ main`"),
    "walltime": ("TIMEOUT", r"rank 2 never entered all_reduce #6 of the default group \(ranks 0, 1 waited \d+ s\); "
                            r"rank 2 was in `forensics_plant\.py:\d+ save_checkpoint`"),
}


def write_experiment(path: Path, argv: list[str], extra: str = "", ranks: int = 3) -> Path:
    path.write_text(f"name: t\nworkload:\n  kind: command\n  argv: {json.dumps(argv)}\n"
                    f"resources:\n  nodes: 1\n  ranks_per_node: {ranks}\n{extra}")
    return path


def only_run(cwd: Path) -> Path:
    [run] = [p.parent for p in (cwd / "hpcprof-runs").glob("*/*/config.json")]
    return run


def flat(text: str) -> str:
    """Text as one line: the terminal report wraps long lines."""
    return re.sub(r"\s+", " ", text)


def status_row(cwd: Path) -> dict:
    [row] = json.loads(hpcprof("status", "--format", "json", cwd=cwd, check=True).stdout)
    return row


class PlantedRuns(dict):
    """fault -> (its working directory, run directory), each submitted on first use and waited for,
    but those `start`ed beforehand: submitted then (in the background), waited for on first use."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        super().__init__()
        self.factory = factory
        self.started: dict[str, Path] = {}

    def submit(self, fault: str, *wait: str) -> Path:
        cwd = self.factory.mktemp(fault)
        argv, extra = FAULTS[fault]
        exp = write_experiment(cwd / "exp.yaml", [sys.executable, str(PLANT), *argv], extra)
        hpcprof("submit", str(exp), "--site", "local", *wait, cwd=cwd, timeout=400)
        return cwd

    def start(self, fault: str) -> None:
        self.started[fault] = self.submit(fault)

    def __missing__(self, fault: str) -> tuple[Path, Path]:
        if fault in self.started:
            cwd = self.started.pop(fault)
            deadline = time.monotonic() + 400
            while status_row(cwd)["state"] in ("PENDING", "RUNNING", "UNKNOWN") and time.monotonic() < deadline:
                time.sleep(2)
        else:
            cwd = self.submit(fault, "--wait")
        self[fault] = (cwd, only_run(cwd))
        return self[fault]


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlantedRuns]:
    """The planted runs; the walltime's (a minute of hang) starts at once, beside the others."""
    runs = PlantedRuns(tmp_path_factory)
    runs.start("walltime")
    yield runs
    for cwd in runs.started.values():       # not used by the tests selected: not left running
        hpcprof("cancel", only_run(cwd).name, cwd=cwd)


@pytest.mark.slow     # real multi-rank jobs (the developer tier leaves them to the full suite)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_planted_fault_is_named_by_status_report_html_and_logs(planted: PlantedRuns, fault: str) -> None:
    cwd, run = planted[fault]
    state, said = SAID[fault]
    row = status_row(cwd)
    assert row["state"] == state and re.search(said, row["reason"]), row
    sentence = row["reason"]
    report = hpcprof("report", run.name, cwd=cwd, check=True).stdout
    assert f"{state}: {sentence}" in flat(report), report
    page = cwd / "report.html"
    hpcprof("report", run.name, "--html", str(page), cwd=cwd, check=True)
    assert html.escape(sentence) in page.read_text()
    hang = hpcprof("logs", run.name, "--hang", cwd=cwd, check=True).stdout
    assert hang.startswith(f"{state}: {sentence}\n"), hang
    assert all(re.search(rf"│\s+{rank} │", hang) for rank in range(3)), hang
    # nothing else lost: every rank's log, the job's files, and collect with the forensics tables
    for name in ("config.json", "job.sh", "rank_wrapper.sh", "status", "logs/job.out",
                 *(f"logs/rank{rank}.log" for rank in range(3))):
        assert (run / name).is_file(), name
    hpcprof("collect", run.name, cwd=cwd, check=True)
    from hpcprof.run.results import read_table

    ranks = read_table(run, "forensics_ranks")
    assert ranks is not None and ranks["rank"].tolist() == [0, 1, 2]
    manifest = read_table(run, "files_manifest")["path"].tolist()
    assert all(f"forensics/{p.name}" in manifest for p in (run / "forensics").iterdir() if p.name.startswith("fr_"))


@pytest.mark.slow     # real multi-rank jobs (the developer tier leaves them to the full suite)
def test_the_hung_rank_s_stack_is_shown_below_the_sentence(planted: PlantedRuns) -> None:
    cwd, run = planted["hang"]
    report = hpcprof("report", run.name, cwd=cwd, check=True).stdout
    below = report.split("never entered all_reduce #6", 1)[1]
    assert re.search(r"rank 2 at the exception on rank \d, most recent call first:\s+forensics_plant\.py:\d+ "
                     r"save_checkpoint\s+forensics_plant\.py:\d+ main", below), report
    hang = hpcprof("logs", run.name, "--hang", "--format", "json", cwd=cwd, check=True).stdout
    rows = {row["rank"]: row for row in json.loads(hang)}
    assert rows[0]["entered"] == rows[1]["entered"] == "all_reduce #6" and rows[2]["entered"] == "all_reduce #5"
    assert rows[2]["where"].endswith("save_checkpoint") and rows[0]["error"].startswith("RuntimeError: Timed out")


@pytest.mark.slow     # real multi-rank jobs (the developer tier leaves them to the full suite)
def test_the_walltime_warning_asked_every_rank_for_its_dump(planted: PlantedRuns) -> None:
    """TIMEOUT: the job's timer warned it 25 s before the walltime, every rank (alive, waiting) dumped."""
    _, run = planted["walltime"]
    status = (run / "status").read_text()
    assert "forensics=walltime-warning" in status and "signal=TERM" in status
    assert (run / "forensics" / "dump.request").read_text().startswith("walltime warning\n")
    assert sorted(p.name for p in (run / "forensics").glob("fr_rank*")) == ["fr_rank0", "fr_rank1", "fr_rank2"]
    stacks = (run / "forensics" / "stacks_rank0.txt").read_text()
    assert "(walltime warning); main thread" in stacks and "in all_reduce" in stacks


@pytest.mark.slow     # real multi-rank jobs (the developer tier leaves them to the full suite)
def test_logs_hang_asks_a_running_hung_run_where_its_ranks_are(tmp_path: Path) -> None:
    """A run that hangs (Gloo would wait 10 min) is still RUNNING: `logs --hang` asks its ranks for
    their dumps and names the collective rank 2 never entered, while the others wait in it."""
    exp = write_experiment(tmp_path / "exp.yaml", [sys.executable, str(PLANT), "hang", "3", "600", "3600"])
    hpcprof("submit", str(exp), "--site", "local", cwd=tmp_path, check=True)
    run = only_run(tmp_path)
    try:
        deadline = time.monotonic() + 150
        while "never entered" not in (out := hpcprof("logs", run.name, "--hang", cwd=tmp_path, check=True).stdout):
            assert time.monotonic() < deadline, out
        assert re.match(r"RUNNING: rank 2 never entered all_reduce #6 of the default group \(ranks 0, 1 waited [\d.,]+ m?s\); "
                        r"rank 2 was in `forensics_plant\.py:\d+ save_checkpoint`\n", out), out
        assert "rank 2 at the hpcprof logs --hang request, most recent call first:" in out
    finally:
        hpcprof("cancel", run.name, cwd=tmp_path, check=True)


@pytest.mark.slow     # real multi-rank jobs (the developer tier leaves them to the full suite)
@pytest.mark.parametrize("fault", ["hang", "mismatch", "exception"])
def test_the_reader_agrees_with_pytorch_s_analyser(planted: PlantedRuns, fault: str) -> None:
    """The same collective, kind and missing ranks from PyTorch's fr_trace (build_db) and from
    hpcprof's own reader, on the dumps of a real run."""
    from hpcprof.analysis.forensics.dumps import analyse_dumps

    _, run = planted[fault]
    theirs = analyse_dumps(run / "forensics", use_torch=True)
    ours = analyse_dumps(run / "forensics", use_torch=False)
    assert theirs.engine == "PyTorch fr_trace" and ours.engine == "hpcprof"
    assert [(f.group, f.seq, f.kind, f.missing) for f in theirs.findings] == \
           [(f.group, f.seq, f.kind, f.missing) for f in ours.findings] != []


def test_a_dump_that_would_run_code_is_refused(tmp_path: Path) -> None:
    import pickle

    from hpcprof.analysis.forensics.dumps import analyse_dumps

    class Boom:
        def __reduce__(self) -> tuple:
            return (print, ("ran",))

    (tmp_path / "fr_rank0").write_bytes(pickle.dumps({"entries": [Boom()]}))
    found = analyse_dumps(tmp_path)
    assert found.findings == [] and len(found.problems) == 1 and "refused builtins.print" in found.problems[0]


def test_without_forensics_the_job_is_rendered_as_before_and_a_log_names_the_failure(tmp_path: Path) -> None:
    """forensics.enabled: false: no hook, no Flight Recorder, the launcher in the foreground; the
    failed rank is still named, from its log's last traceback line, past nsys-like progress output."""
    program = ("import os, sys\nif os.environ['HPCPROF_RANK'] == '1':\n    raise RuntimeError('CUDA error: invalid "
               "device ordinal')\n")
    progress = "; ".join(["echo \"Generating '/tmp/nsys-report-1.qdstrm' [=====    ] 40%\""] * 3)
    argv = ["bash", "-c", f"{sys.executable} -c \"$0\"; rc=$?; {progress}; exit $rc", program]
    exp = write_experiment(tmp_path / "exp.yaml", argv, "forensics:\n  enabled: false\nprofile:\n  window:\n"
                           "    auto: false\n", ranks=2)   # no optimizer step hook either: nothing injected
    hpcprof("submit", str(exp), "--site", "local", "--wait", cwd=tmp_path, timeout=200)
    run = only_run(tmp_path)
    assert not (run / "inject").exists() and not (run / "forensics").exists()
    script, wrapper = (run / "job.sh").read_text(), (run / "rank_wrapper.sh").read_text()
    assert "USR1" not in script and "dump.request" not in script and "/inject" not in wrapper
    assert "TORCH_FR" not in wrapper and script.count(" &\n") == 0  # the launcher in the foreground
    row = status_row(tmp_path)
    assert row["state"] == "FAILED"
    assert row["reason"] == "rank 1 failed: RuntimeError: CUDA error: invalid device ordinal", row


def test_forensics_settings_are_checked(tmp_path: Path) -> None:
    exp = write_experiment(tmp_path / "exp.yaml", ["true"], ranks=2)
    for bad in ("forensics.warning_seconds=0", "forensics.enabled=maybe", "forensics.buffer=-1", "forensics.extra=1"):
        result = hpcprof("render", str(exp), "--site", "local", "--set", bad, cwd=tmp_path)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, (bad, result.stderr)
        assert bad.split("=")[0].split(".")[-1] in result.stderr and "Traceback" not in result.stderr


def test_render_arms_every_scheduler(tmp_path: Path) -> None:
    """Slurm asks for --signal=B:USR1 (warning_seconds before the walltime, at most half of it); the
    other schedulers' jobs warn themselves with a timer; every rank wrapper puts the hook first on
    PYTHONPATH and sets the Flight Recorder variables where the experiment left them unset."""
    exp = write_experiment(tmp_path / "exp.yaml", ["true"], "  walltime: '00:10:00'\nenv:\n  TORCH_FR_BUFFER_SIZE: '64'\n",
                           ranks=2)
    slurm = hpcprof("render", str(exp), "--site", "slurm-local", cwd=tmp_path, check=True).stdout
    assert "#SBATCH --signal=B:USR1@120\n" in slurm and "sleep " not in slurm and "trap 'hp_woken=1;" in slurm
    out = tmp_path / "out"
    hpcprof("render", str(exp), "--site", "local", "-o", str(out), "--set", "forensics.warning_seconds=400", cwd=tmp_path,
            check=True)
    script, wrapper = (out / "job.sh").read_text(), (out / "rank_wrapper.sh").read_text()
    assert "sleep 300 &" in script and "--signal" not in script  # 600 s walltime: warned at half of it
    assert f"export PYTHONPATH={out}/inject${{PYTHONPATH:+:$PYTHONPATH}}" in wrapper
    assert "hp_unset TORCH_FR_BUFFER_SIZE && export TORCH_FR_BUFFER_SIZE=2000" in wrapper
    assert sorted(p.name for p in (out / "inject").iterdir()) == [
        "_hpcprof_files.py", "_hpcprof_forensics.py", "_hpcprof_memory.py", "_hpcprof_sampler.py", "_hpcprof_steps.py",
        "sitecustomize.py"]  # a command: the step hook too
    # the experiment's own value wins: exported by the job before the wrapper runs
    env = {"TORCH_FR_BUFFER_SIZE": "64", "HPCPROF_RANK": "0", "PMI_RANK": "0", "PMI_LOCAL_RANK": "0"}
    shown = subprocess.run(["bash", str(out / "rank_wrapper.sh"), "bash", "-c", "echo $TORCH_FR_BUFFER_SIZE "
                            "$TORCH_NCCL_DUMP_ON_TIMEOUT $TORCH_FR_DUMP_TEMP_FILE"],
                           env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True, check=True).stdout
    assert shown.split() == ["64", "1", f"{out}/forensics/fr_nccl_rank"]


def hook_env(tmp_path: Path, *path: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HPCPROF_RUN_DIR": str(tmp_path), "HPCPROF_RANK": "3", "HPCPROF_FORENSICS": "1",
            "PYTHONPATH": ":".join(str(p) for p in path)}


def test_the_start_up_hook_chains_to_the_sitecustomize_it_shadows(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins\nbuiltins.OTHER_SITECUSTOMIZE = 'ran'\n")
    inject = REPO / "hpcprof" / "inject"
    code = ("import builtins, faulthandler, os, sys; print(builtins.OTHER_SITECUSTOMIZE, faulthandler.is_enabled(), "
            "os.environ.get('HPCPROF_ARMED_PID') == str(os.getpid()))")
    out = subprocess.run([sys.executable, "-c", code], env=hook_env(tmp_path, inject, other), capture_output=True,
                         text=True, check=True)
    assert out.stdout.split() == ["ran", "True", "True"] and out.stderr == ""
    assert not (tmp_path / "forensics" / "stacks_rank3.txt").exists()  # a clean exit leaves no empty stacks file
    child = subprocess.run([sys.executable, "-c", "import subprocess, sys; subprocess.run([sys.executable, '-c', "
                            "'import os, faulthandler; print(faulthandler.is_enabled(), os.environ[\"HPCPROF_ARMED_PID\"] "
                            "== str(os.getppid()))'])"],
                           env=hook_env(tmp_path, inject), capture_output=True, text=True, check=True)
    assert child.stdout.split() == ["False", "True"]  # the rank's own Python children are not armed again


@pytest.mark.parametrize(("version", "legacy"), [("2.7.1", "512"), ("2.13.0+cpu", "")])
def test_the_start_up_hook_names_the_flight_recorder_for_an_older_torch(tmp_path: Path, version: str,
                                                                         legacy: str) -> None:
    """torch before 2.8 reads TORCH_NCCL_TRACE_BUFFER_SIZE only: the hook copies TORCH_FR_BUFFER_SIZE there
    (from the rank's torch/version.py, without importing torch); a newer torch is left alone."""
    (tmp_path / "site" / "torch").mkdir(parents=True)
    (tmp_path / "site" / "torch" / "__init__.py").write_text("raise ImportError('the hook must not import torch')\n")
    (tmp_path / "site" / "torch" / "version.py").write_text(f"__version__ = '{version}'\n")
    env = {**hook_env(tmp_path, REPO / "hpcprof" / "inject", tmp_path / "site"), "TORCH_FR_BUFFER_SIZE": "512"}
    out = subprocess.run([sys.executable, "-c", "import os, sys; print(repr(os.environ.get("
                          "'TORCH_NCCL_TRACE_BUFFER_SIZE', '')), 'torch' in sys.modules)"],
                         env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [repr(legacy), "False"]


@pytest.mark.slow
def test_the_start_up_hook_records_an_exception_and_a_fatal_signal(tmp_path: Path) -> None:
    inject = REPO / "hpcprof" / "inject"
    failed = subprocess.run([sys.executable, "-c", "def load():\n    raise KeyError('batch 7')\nload()"],
                            env=hook_env(tmp_path, inject), capture_output=True, text=True)
    assert failed.returncode == 1 and "KeyError: 'batch 7'" in failed.stderr
    record = json.loads((tmp_path / "forensics" / "exception_rank3.json").read_text())
    assert (record["type"], record["message"], record["frames"][-1][2]) == ("KeyError", "'batch 7'", "load")
    assert (tmp_path / "forensics" / "dump.request").read_text().startswith("exception on rank 3\n")
    # another run directory: the first program's dump request would make this one's watcher dump too
    (crash := tmp_path / "crash").mkdir()
    crashed = subprocess.run([sys.executable, "-c", "import os, signal\ndef step():\n    os.kill(os.getpid(), "
                              "signal.SIGSEGV)\nstep()"], env=hook_env(crash, inject), capture_output=True, text=True)
    assert crashed.returncode == -11
    from hpcprof.analysis.forensics.ranks import parse_stacks, where

    process, blocks = parse_stacks((crash / "forensics" / "stacks_rank3.txt").read_text())
    assert process["pid"] > 0 and blocks[-1].kind == "fatal" and blocks[-1].reason == "Segmentation fault"
    assert where(blocks[-1].frames).function == "step"


def test_a_stacks_block_whose_threads_show_no_frame_is_read() -> None:
    """A dump whose threads all show `<no Python frame>` (none of them the crashing one) gives a
    block without frames, not an IndexError."""
    from hpcprof.analysis.forensics.ranks import parse_stacks

    text = ("Fatal Python error: Segmentation fault\n\nThread 0x00007f01 (most recent call first):\n"
            "  <no Python frame>\n\nThread 0x00007f02 (most recent call first):\n  <no Python frame>\n")
    _, blocks = parse_stacks(text)
    assert [(b.kind, b.reason, b.frames) for b in blocks] == [("fatal", "Segmentation fault", [])]


def test_a_thread_not_yet_run_does_not_split_a_fatal_dump() -> None:
    """A thread started just before the crash and not yet run shows its creator's ident without a
    frame (Python 3.11's faulthandler, seen with the hook's watcher under load): the dump stays one
    fatal block whose frames are the crashing thread's; a later dump that repeats a thread with
    frames is a block of its own."""
    from hpcprof.analysis.forensics.ranks import parse_stacks

    fatal = ("Fatal Python error: Segmentation fault\n\nThread 0x00007ffad0be4b80 (most recent call first):\n"
             "  <no Python frame>\n\nCurrent thread 0x00007ffad0be4b80 (most recent call first):\n"
             '  File "<string>", line 3 in step\n  File "<string>", line 4 in <module>\n')
    _, blocks = parse_stacks(fatal)
    assert [(b.kind, [f.function for f in b.frames]) for b in blocks] == [("fatal", ["step", "<module>"])]
    signal = ('Current thread 0x00007ffad0be4b80 (most recent call first):\n  File "t.py", line 9 in wait\n\n')
    _, blocks = parse_stacks(signal + signal)
    assert [(b.kind, [f.function for f in b.frames]) for b in blocks] == [("signal", ["wait"])] * 2


def test_rank_lists_and_error_lines() -> None:
    from hpcprof.analysis.forensics.ranks import error_line, launcher_exits
    from hpcprof.analysis.forensics.verdict import rank_list, short_error

    assert rank_list([3]) == "rank 3" and rank_list([0, 1, 2, 4, 5, 6, 7]) == "ranks 0–2, 4–7"
    assert rank_list([0, 1, 3]) == "ranks 0, 1, 3"
    log = ("[rank1]: Traceback (most recent call last):\n[rank1]:   File \"m.py\", line 88, in f\n"
           "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
           "Generating '/tmp/nsys-report.qdstrm'\n[1/1] [====100%] report.nsys-rep\n")
    assert error_line(log) == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert error_line("terminate called after throwing an instance of 'c10::Error'\n  what():  NCCL error: "
                      "unhandled system error\n") == "c10::Error: NCCL error: unhandled system error"
    assert short_error("RuntimeError: [/__w/pytorch/gloo/transport/tcp/pair.cc:537] Read error") == \
        "RuntimeError: Read error"
    assert launcher_exits("srun: error: nid001: tasks 2-3: Exited with exit code 7\n", {}) == ({
        2: "exited with code 7", 3: "exited with code 7"}, None)
    assert launcher_exits("=   PID 41 RUNNING AT vm\n=   EXIT CODE: 9\nYOUR APPLICATION TERMINATED WITH THE EXIT "
                          "STRING: Killed (signal 9)\n", {("vm", 41): 3}) == ({}, (3, "was killed by SIGKILL (signal 9)"))
    assert launcher_exits("x3004c0s7b0n0: rank 5 died from signal 9\n", {}) == ({5: "was killed by SIGKILL (signal 9)"},
                                                                                  None)


def test_where_no_rank_started_the_job_log_s_error_is_named(tmp_path: Path) -> None:
    """launch_failure: the first line of the job log that says something failed, past the job's own
    notes and a site set-up's chatter (Hydra's C source positions dropped); none once a rank left a log."""
    from hpcprof.analysis.forensics.ranks import launch_failure

    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "job.out").write_text(
        "hpcprof: NCCL_NET=Socket uses none\nLoading module cray-mpich/8.1.28\n"
        "[mpiexec@x1] HYDT_bsci_init (lib/tools/bootstrap/src/bsci_init.c:156): unrecognized launcher: bogus\n"
        "[mpiexec@x1] main (/mpich-5.0.2/src/pm/hydra/mpiexec/mpiexec.c:75): unable to initialize the bootstrap server\n")
    assert launch_failure(tmp_path) == "[mpiexec@x1] HYDT_bsci_init: unrecognized launcher: bogus"
    (tmp_path / "logs" / "job.out").write_text("/usr/bin/mpiexec: Error: unknown option \"-ppn\"\n"
                                               "Type '/usr/bin/mpiexec --help' for usage.\n")
    assert launch_failure(tmp_path) == '/usr/bin/mpiexec: Error: unknown option "-ppn"'
    (tmp_path / "logs" / "job.out").write_text("module: loaded\nthe job script ended here\n")
    assert launch_failure(tmp_path) == "the job script ended here"
    (tmp_path / "logs" / "rank0.log").write_text("")
    assert launch_failure(tmp_path) is None


def test_nsys_recorded_nothing_because_the_program_failed_first(tmp_path: Path) -> None:
    """A rank's nsys says "the capture range never opened" only where the program did not fail first; a rank
    whose program raised is named with its error, found in its log past nsys's own output."""
    import msgspec

    from hpcprof.run.record import RunRecord
    from hpcprof.tools.nsys.analysis.collect import NsysCollector

    (tmp_path / "logs").mkdir()
    (tmp_path / "profiles" / "nsys").mkdir(parents=True)
    nsys_tail = "Generating '/tmp/nsys-report-81e2.qdstrm'\n[1/1] [0%                          ] report.nsys-rep\n"
    (tmp_path / "logs" / "rank0.log").write_text("Collecting data...\nNo reports were generated\n")
    (tmp_path / "logs" / "rank1.log").write_text(
        "Collecting data...\n[rank1]: Traceback (most recent call last):\n[rank1]:   File \"train.py\", line 9, in <module>\n"
        "[rank1]: RuntimeError: CUDA error: invalid device ordinal\n" + nsys_tail + "No reports were generated\n")
    record = msgspec.convert({"experiment": {"name": "e", "workload": {"kind": "command"}, "profile": {
        "tool": "nsys", "ranks": "all", "nsys": {"capture_range": "cudaProfilerApi"}}},
        "site": {}, "sweep_point": {}, "ranks_per_node": 2, "world_size": 2}, RunRecord)
    causes = [NsysCollector().missing_cause(tmp_path, record, rank) for rank in (0, 1)]
    assert causes == [
        "nsys recorded nothing: the capture range never opened (logs/rank0.log: No reports were generated)",
        "nsys recorded nothing: the program failed first (RuntimeError: CUDA error: invalid device "
        "ordinal) (logs/rank1.log: No reports were generated)"]


def test_the_hooks_own_thread_is_never_where_a_rank_was() -> None:
    """On 2 H200s NCCL's watchdog aborted rank 0 while the hook's watcher thread was Python's current
    one: its stack is no place in the program (benchmarks/gpu/results/forensics_gpu.txt)."""
    from hpcprof.analysis.forensics.ranks import Frame, is_consequence, where

    hook = [Frame("/run/inject/_hpcprof_forensics.py", 140, "_watch"),
            Frame("/usr/lib/python3.12/threading.py", 1010, "run")]
    assert where(hook) is None
    program = [Frame("/usr/lib/python3.12/site-packages/torch/distributed/c10d_logger.py", 83, "wrapper"),
               Frame("/work/plant_nccl.py", 40, "main")]
    assert where(program) == program[1]
    assert is_consequence("died of SIGABRT (Aborted): c10::DistBackendError: [Rank 0] Watchdog caught collective "
                          "operation timeout: WorkNCCL(SeqNum=4, OpType=ALLREDUCE)")


def test_the_collect_job_is_not_armed(tmp_path: Path) -> None:
    """`collect --submit`'s job runs hpcprof itself: no start-up hook (its watcher thread made collect's
    pool start from a fork server, whose socket path in the job's $TMPDIR was too long: found by
    tests/test_arrays_deps.py on the one-node Slurm) and no optimizer step hook."""
    from hpcprof.campaign import submit as campaign
    from hpcprof.config.site import find_site

    [run] = campaign.plan_collect([], find_site("local", None), tmp_path, None, None, "00:10:00").runs
    assert sorted(run.files) == ["job.sh", "rank_wrapper.sh"]
    assert "HPCPROF_FORENSICS" not in run.files["rank_wrapper.sh"] and "HPCPROF_STEPS" not in run.files["rank_wrapper.sh"]
