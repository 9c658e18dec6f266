"""ddp: the Echo input folder running unchanged under mpiexec with gloo, the window rule, bad input."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

BIN = Path(sys.executable).parent
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "echo_gpt2"


def clean_env(**extra: str) -> dict[str, str]:
    """The test's environment without launcher/hpcprof variables, one thread per rank."""
    drop = ("HPCPROF_", "PMI_", "PMIX_", "OMPI_", "SLURM_", "PALS_", "MPI_LOCAL", "GPT2_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update({"OMP_NUM_THREADS": "1", **extra})
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES"):
        env.pop(name, None)
    return env


def run_ddp(n: int, argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "hpcprof.workloads.ddp", *argv]
    if n:
        cmd = [str(BIN / "mpiexec"), "-n", str(n), *cmd]
    return subprocess.run(cmd, cwd=cwd, env=clean_env(**env), capture_output=True, text=True, timeout=240)


@pytest.mark.parametrize(
    ("steps", "epochs", "warmups", "iteration", "epoch", "step"),
    [
        (100, 3, 0, 250, 2, 50),  # Echo's defaults: global iteration 250 of 300
        (100, 3, 2, 450, 4, 50),  # warm-ups shift the window into the real last epoch
        (7, 2, 1, 17, 2, 3),
        (1, 1, 0, 0, 0, 0),
        (2, 1, 3, 7, 3, 1),
    ],
)
def test_window_rule_counts_warmups(steps: int, epochs: int, warmups: int, iteration: int, epoch: int, step: int) -> None:
    from hpcprof.workloads import ddp_train

    window = ddp_train.profile_window(steps, epochs, warmups)
    assert window == ddp_train.Window(iteration, epoch, step)
    assert window.epoch == warmups + epochs - 1  # always the last epoch that runs
    assert window.iteration < (warmups + epochs) * steps


def test_window_rule_rejects_empty_epochs() -> None:
    from hpcprof.workloads import ddp_train

    with pytest.raises(ValueError):
        ddp_train.profile_window(0, 3, 0)


@pytest.mark.slow
def test_echo_folder_runs_unchanged_two_ranks(tmp_path: Path) -> None:
    from hpcprof.workloads import ddp_train

    echo = tmp_path / "input"
    shutil.copytree(EXAMPLE, echo)
    before = {p.name: p.read_bytes() for p in echo.iterdir()}
    proc = run_ddp(2, ["--echo-input", str(echo)], tmp_path, GPT2_BATCHES="6")
    assert proc.returncode == 0, proc.stderr
    assert {p.name: p.read_bytes() for p in echo.iterdir() if p.is_file()} == before

    result = json.loads((tmp_path / "results" / "ddp_steps.json").read_text())
    cfg = result["config"]
    # local_config.json: world_size 2, cap_size 2, epochs 2, batchsize 4, warmup_epochs 1
    assert (cfg["world_size"], cfg["cap_size"], cfg["epochs"], cfg["batchsize"], cfg["warmup_epochs"]) == (2, 2.0, 2, 4, 1)
    assert cfg["steps_per_epoch"] == 6 and cfg["optimizer"] == "adamw"
    assert result["window"] == {
        "iteration": 15, "epoch": 2, "step": 3, "mode": "backward", "total_epochs": 3, "total_iterations": 18
    }
    steps = pd.DataFrame(result["steps"])
    assert len(steps) == 2 * 18 * len(ddp_train.PHASES)
    assert set(steps["rank"]) == {0, 1}
    assert (steps["counted"] == (steps["epoch"] >= 1)).all()
    assert set(steps.loc[steps["window"], "iteration"]) == {15}
    phases = pd.DataFrame(result["phases"]).set_index("phase")
    assert list(phases.index) == ddp_train.PHASES
    assert (phases["samples"] == 2 * 11).all()  # counted epochs, window step left out
    assert "window: iteration 15 (epoch 2, step 3)" in proc.stdout


BARE_MODEL = '''
import torch

def get_model(rank, cap_size):
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))

def get_dataloader(rank, batchsize):
    return [(torch.randn(batchsize, 8).to(rank), None)] * 5

def forward_pass(model, inputs):
    return model(inputs)

def backward_pass(output):
    output.square().mean().backward()
'''


@pytest.mark.slow
def test_bare_module_wrapped_and_torch_trace_per_rank(tmp_path: Path) -> None:
    model_file = tmp_path / "bare_model.py"
    model_file.write_text(BARE_MODEL)
    profile_dir = tmp_path / "profiles" / "torch"
    argv = ["--model-file", str(model_file), "--epochs", "2", "--batchsize", "3", "--cap-size", "1", "--optimizer", "sgd"]
    proc = run_ddp(
        2,
        argv,
        tmp_path,
        HPCPROF_PROFILE_TOOL="torch",
        HPCPROF_PROFILE_DIR=str(profile_dir),
        HPCPROF_TORCH_SCHEDULE="wait=1,warmup=1,active=1",
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "results" / "ddp_steps.json").read_text())
    assert result["config"]["parameters"] == 8 * 16 + 16 + 16 * 8 + 8
    assert result["window"]["iteration"] == 7  # epoch 1, step 2 of 5
    assert sorted(p.name for p in profile_dir.iterdir()) == ["rank0.pt.trace.json", "rank1.pt.trace.json"]
    for rank in (0, 1):
        trace = json.loads((profile_dir / f"rank{rank}.pt.trace.json").read_text())
        names = {e.get("name") for e in trace["traceEvents"]}
        assert {"ProfilerStep#7", "forward", "backward", "optimizer"} <= names
        assert not any(str(n).startswith("ProfilerStep#") and n != "ProfilerStep#7" for n in names)


def write_echo(folder: Path, model: str | None = None, local: str | None = None, global_: str | None = None) -> Path:
    folder.mkdir()
    (folder / "define_model.py").write_text(model if model is not None else (EXAMPLE / "define_model.py").read_text())
    (folder / "local_config.json").write_text(local if local is not None else (EXAMPLE / "local_config.json").read_text())
    (folder / "global_config.json").write_text(global_ if global_ is not None else "{}")
    return folder


@pytest.mark.slow
@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"model": "def get_model(rank, cap_size):\n    pass\n"},
         "define_model.py: missing function(s) get_dataloader, forward_pass, backward_pass"),
        ({"model": "import not_a_module_anywhere\n"},
         "define_model.py: import failed: ModuleNotFoundError: No module named 'not_a_module_anywhere'"),
        ({"local": '{"epochs": 3,}'}, "local_config.json: not valid JSON: Expecting property name enclosed in double quotes"),
        ({"local": '{"epochs": "three"}'}, "local_config.json: field 'epochs': expected an integer, got 'three'"),
        ({"local": '{"epoch": 3}'}, "local_config.json: unknown key(s) epoch"),
        ({"global_": '{"cuda_version_check": "11.8"}'}, "cuda_version_check: 11.8 expected"),
        ({"local": '{"world_size": 4}'}, "world_size: the config asks for 4 ranks, the launcher started 2"),
    ],
)
def test_bad_echo_input_exit_2_without_hang(tmp_path: Path, files: dict[str, str], message: str) -> None:
    echo = write_echo(tmp_path / "input", **files)
    proc = run_ddp(2, ["--echo-input", str(echo)], tmp_path, PYTHONPROFILEIMPORTTIME="1")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count(message) == 2, proc.stderr
    # refused before torch loads, but for the check of torch's CUDA version: the ranks' import profiles
    # (-X importtime) name hpcprof's modules, and torch only there
    assert re.search(r"\| +hpcprof\.workloads\.ranks$", proc.stderr, re.M), proc.stderr
    assert bool(re.search(r"\| +torch$", proc.stderr, re.M)) == message.startswith("cuda_version_check"), proc.stderr


@pytest.mark.slow
def test_bench_ddp_command_bad_input(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(BIN / "hpcprof"), "bench", "ddp", "--echo-input", str(tmp_path / "missing")],
        env=clean_env(), capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "missing: Echo input folder not found" in proc.stderr


def test_args_need_a_model_and_round_trip() -> None:
    from hpcprof.workloads import ddp

    with pytest.raises(ValueError, match="echo_input or model_file is required"):
        ddp.DdpArgs()
    args = ddp.DdpArgs(echo_input=Path("in"), epochs=2, window="step", torch_profiler=True)
    argv = ddp.launch_argv(args, "python3")
    assert argv == ["python3", "-m", "hpcprof.workloads.ddp", "--echo-input", "in", "--epochs", "2",
                    "--window", "step", "--torch-profiler"]
    assert ddp.parse_args(argv[3:]) == args


def test_explicit_fields_override_echo_configs(tmp_path: Path) -> None:
    from hpcprof.workloads import ddp

    echo = write_echo(tmp_path / "input", global_='{"cuda_version_check": "", "nsys_path": "/x/nsys"}')
    resolved = ddp.resolve_args(ddp.DdpArgs(echo_input=echo, epochs=5))
    assert (resolved.epochs, resolved.cap_size, resolved.warmup_epochs, resolved.world_size) == (5, 2.0, 1, 2)
    assert resolved.cuda_version_check is None


NOT_A_MODULE = BARE_MODEL.replace(
    "return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))", 'return "a string"'
)


@pytest.mark.slow
def test_bad_model_after_init_aborts_all_ranks_with_2(tmp_path: Path) -> None:
    model_file = tmp_path / "define_model.py"
    model_file.write_text(NOT_A_MODULE)
    proc = run_ddp(2, ["--model-file", str(model_file)], tmp_path)
    assert proc.returncode == 2, proc.stderr
    # The first rank to abort is heard (it waits for Hydra to read its line); the other may be killed
    # before it writes. No rank prints its error twice.
    assert 1 <= proc.stderr.count("error: get_model returned str, expected a torch.nn.Module\n") <= 2, proc.stderr
