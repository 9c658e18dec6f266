"""`profile.reference` on the built-in workloads (hpcprof.render.steps.reference_argv,
hpcprof.analysis.steps.loop_perturbation, hpcprof.collect.files.loop_perturbation_tables): the job
runs seqpar or ddp once unprofiled before the profiled run, over the same ranks and launcher, its
results in `results/reference/`; collect states the profiler's slowdown of the profiled run's
counted iterations against the reference's (steps_perturbation, profiler.slowdown_pct and
profiler.unprofiled_step), the latter checked against the reference's own results file. Refused
with one line where it cannot be: a `command` without the step hook, Kubernetes."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from hpcprof_cli import hpcprof
from test_workload_ddp import BARE_MODEL

from hpcprof.analysis.steps import MIN_STEPS, REFERENCE_RUN, SAME_PROCESS, loop_perturbation
from hpcprof.core import catalog as c
from hpcprof.run.results import read_headline, read_table

REPO = Path(__file__).resolve().parents[1]
NSYS_2022 = Path("/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys")   # tests/services/nsys.sh
#: each workload's results file and its per-iteration rows' key and phase
RESULTS = {"seqpar": ("seqpar.json", "iterations", "iteration"), "ddp": ("ddp_steps.json", "steps", "step")}


def workload(kind: str, folder: Path) -> dict[str, Any]:
    """A small seqpar or ddp workload on CPU ranks (ddp: 1 warm-up + 2 counted epochs of 5 steps)."""
    if kind == "seqpar":
        return {"kind": "seqpar", "args": {"sequence_length": 64, "hidden_dim": 32, "iterations": 12,
                                           "warmup_iterations": 2, "precision": "float32", "device": "cpu"}}
    model = folder / "define_model.py"
    model.write_text(BARE_MODEL)
    return {"kind": "ddp", "args": {"model_file": str(model), "epochs": 2, "warmup_epochs": 1, "batchsize": 3,
                                    "optimizer": "sgd", "device": "cpu"}}


def write_experiment(path: Path, kind: str, profile: dict[str, Any], name: str = "ref") -> Path:
    path.write_text(yaml.safe_dump({"name": name, "workload": workload(kind, path.parent),
                                    "resources": {"nodes": 1, "ranks_per_node": 2}, "profile": profile}))
    return path


def render(tmp_path: Path, kind: str, profile: dict[str, Any], *site: str) -> tuple[int, str, str, str]:
    """(exit status, stderr, job.sh, rank_wrapper.sh) of `hpcprof render` (site: --site local by default)."""
    out = tmp_path / f"out{len(list(tmp_path.glob('out*.yaml')))}"
    exp = write_experiment(tmp_path / f"{out.name}.yaml", kind, profile)
    done = hpcprof("render", str(exp), *(site or ("--site", "local")), "-o", str(out), cwd=tmp_path)
    read = (lambda name: (out / name).read_text() if (out / name).exists() else "")
    return done.returncode, done.stderr, read("job.sh"), read("rank_wrapper.sh")


@pytest.mark.parametrize("kind", ["seqpar", "ddp"])
def test_the_job_runs_the_workload_unprofiled_first_under_nsys_and_ncu(tmp_path: Path, kind: str) -> None:
    """Default on under nsys and ncu: the same launcher line with --hpcprof-reference first, before the
    profiled one; off under torch.profiler unless asked, never under `tool: none` or with `false`."""
    module = f"-m hpcprof.workloads.{kind} "
    for tool in ("nsys", "ncu"):
        rc, err, job, wrapper = render(tmp_path, kind, {"tool": tool})
        assert rc == 0, err
        [reference] = [line for line in job.splitlines() if '"$RUN_DIR/rank_wrapper.sh" --hpcprof-reference ' in line]
        [profiled] = [line for line in job.splitlines()
                      if '"$RUN_DIR/rank_wrapper.sh" ' in line and "--hpcprof-reference" not in line]
        assert reference.replace("--hpcprof-reference ", "") == profiled and module in profiled
        assert job.index(reference) < job.index(profiled + "\n")
        assert ("# ---- unprofiled reference (profile.reference): the same workload without the profiler, its whole "
                "loop, its results in $RUN_DIR/results/reference; the baseline of the profiler's slowdown") in job
        assert "hp_status reference_exit_code" in job
        assert ("first: no profiler, its results in results/reference\nif [ \"${1:-}\" = --hpcprof-reference ]; then "
                "shift; hp_profiled=0; export HPCPROF_STEPS_REFERENCE=1; fi") in wrapper
        assert 'if [ "$hp_profiled" = 1 ] && ' in wrapper
    for profile, runs in (({"tool": "torch"}, False), ({"tool": "torch", "reference": True}, True),
                          ({"tool": "nsys", "reference": False}, False), ({"tool": "none"}, False),
                          ({"tool": "none", "reference": True}, False)):
        rc, err, job, _ = render(tmp_path, kind, profile)
        assert rc == 0 and ("--hpcprof-reference" in job) == runs, (profile, err)


def eks_site(tmp_path: Path) -> Path:
    """A Kubernetes site (tests/test_kubernetes.py's EKS cluster) whose volume is `tmp_path`."""
    site = tmp_path / "eks.yaml"
    site.write_text(yaml.safe_dump({
        "name": "eks", "scheduler": "kubernetes", "launcher": {"kind": "mpiexec", "flavor": "openmpi", "command": "mpirun"},
        "node": {"gpus": 8, "cores": 96, "ranks_per_node": 8}, "paths": {"python": "python"},
        "kubernetes": {"image": "example.com/gpu-profile:latest", "pvc": "fsx-claim", "mount_path": str(tmp_path)}}))
    return site


@pytest.mark.parametrize("kind", ["seqpar", "ddp"])
def test_a_reference_that_cannot_be_is_one_line(tmp_path: Path, kind: str) -> None:
    """Kubernetes runs the containers (no second launch in the job): `reference: true` is refused in
    one line naming the field, nothing written; left to its default there is none. A `command`
    without the step hook has nothing to end its reference: refused too."""
    site = ("--site", "eks", "--site-file", str(eks_site(tmp_path)))
    rc, err, job, _ = render(tmp_path, kind, {"tool": "nsys", "reference": True}, *site)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("Error: profile.reference: not supported where the scheduler runs the containers (Kubernetes)")
    assert job == "" and not (tmp_path / "out0").exists()
    rc, err, job, wrapper = render(tmp_path, kind, {"tool": "nsys"}, *site)     # left to its default: none
    assert rc == 0 and "rank_wrapper.sh" in job and "--hpcprof-reference" not in job + wrapper, err
    exp = tmp_path / "command.yaml"
    exp.write_text("name: c\nworkload: {kind: command, argv: [python3, train.py]}\nresources: {nodes: 1, ranks_per_node: 2}\n"
                   "profile: {tool: nsys, reference: true, window: {auto: false}}\n")
    done = hpcprof("render", str(exp), "--site", "local", "-o", str(tmp_path / "command"), cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "profile.reference:" in done.stderr and "profile.window.auto: true" in done.stderr
    assert not (tmp_path / "command").exists()


def test_in_the_reference_run_results_go_apart_and_no_torch_profiler_starts(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    """The rank wrapper's HPCPROF_STEPS_REFERENCE=1: results in the `reference/` folder of wherever
    they would go (a `results_dir` given too), and torch.profiler off even where the workload's own
    `torch_profiler` flag asks for it."""
    from hpcprof.workloads.args import torch_profile_tool_requested
    from hpcprof.workloads.bootstrap import results_dir

    monkeypatch.setenv("HPCPROF_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("HPCPROF_PROFILE_TOOL", "torch")
    assert results_dir(None) == tmp_path / "results" and torch_profile_tool_requested(False)
    monkeypatch.setenv("HPCPROF_STEPS_REFERENCE", "1")
    assert results_dir(None) == tmp_path / "results" / c.REFERENCE_DIR
    assert results_dir(tmp_path / "mine") == tmp_path / "mine" / c.REFERENCE_DIR
    assert not torch_profile_tool_requested(True) and not torch_profile_tool_requested(False)


def rows(kind: str, rank: int, times: list[float], **columns: Any) -> list[dict[str, Any]]:
    """A workload's per-iteration rows of one rank: its whole-iteration phase's times (ms)."""
    phase = RESULTS[kind][2]
    out = [{"rank": rank, "iteration": i, "phase": phase, "time_ms": t, "counted": True, "window": False}
           for i, t in enumerate(times)]
    for name, values in columns.items():
        for row, value in zip(out, values, strict=True):
            row[name] = value
    return out + [{**row, "phase": "other", "time_ms": 1e6} for row in out]     # other phases are no steps


def test_the_loop_against_the_reference_by_hand() -> None:
    """seqpar under nsys: every counted iteration against the reference's, per rank; ddp: its
    warm-up epoch and its window step left out on both sides; seqpar under torch.profiler keeps
    its own untouched iterations as the baseline; without a reference nothing is stated."""
    slow = [15.0 + 0.1 * (i % 3) for i in range(12)]
    fast = [10.0 + 0.1 * (i % 3) for i in range(12)]
    profiled = pd.DataFrame(rows("seqpar", 0, slow) + rows("seqpar", 1, [2 * t for t in slow]))
    reference = pd.DataFrame(rows("seqpar", 0, fast) + rows("seqpar", 1, fast))
    found = loop_perturbation(profiled, "iteration", reference).set_index("rank")
    assert list(found.index) == [0, 1] and set(found["baseline"]) == {REFERENCE_RUN}
    assert found.loc[0, "unprofiled_ms"] == pytest.approx(statistics.median(fast))
    assert found.loc[1, "profiled_ms"] == pytest.approx(statistics.median(slow) * 2)
    assert found.loc[0, "slowdown_pct"] == pytest.approx(100 * (statistics.median(slow) / statistics.median(fast) - 1))
    assert list(found["profiled_steps"]) == [12, 12] and list(found["unprofiled_steps"]) == [12, 12]
    assert (found["low_pct"] <= found["slowdown_pct"]).all() and (found["slowdown_pct"] <= found["high_pct"]).all()
    assert loop_perturbation(profiled, "iteration").empty

    counted = [i >= 5 for i in range(15)]           # 1 warm-up epoch of 5 steps, then 2 counted
    window = [i == 12 for i in range(15)]
    times = [100.0 if not c_ or w else 20.0 + i for i, (c_, w) in enumerate(zip(counted, window, strict=True))]
    ddp = pd.DataFrame(rows("ddp", 0, times, counted=counted, window=window))
    base = pd.DataFrame(rows("ddp", 0, [t / 2 for t in times], counted=counted, window=window))
    [row] = loop_perturbation(ddp, "step", base).to_dict("records")
    kept = [20.0 + i for i in range(5, 15) if i != 12]
    assert (row["profiled_steps"], row["unprofiled_steps"]) == (9, 9)
    assert (row["profiled_ms"], row["unprofiled_ms"]) == (statistics.median(kept), statistics.median(kept) / 2)

    touched = [3 <= i <= 7 for i in range(12)]
    recorded = [4 <= i <= 6 for i in range(12)]
    traced = pd.DataFrame(rows("seqpar", 0, [30.0 if r else 10.0 for r in recorded], window=touched, profiled=recorded))
    [row] = loop_perturbation(traced, "iteration", reference).to_dict("records")
    assert (row["baseline"], row["profiled_steps"], row["unprofiled_steps"]) == (SAME_PROCESS, 3, 7)
    assert row["slowdown_pct"] == pytest.approx(200.0)
    assert MIN_STEPS == 3


@pytest.mark.slow     # collect analyses two nsys exports
def test_an_h200_pair_and_a_damaged_reference(tmp_path: Path, fixtures_dir: Path, gpu_data: Path) -> None:
    """seqpar bf16 on 2 H200s (tests/fixtures/gpu/run1): its run under nsys as the profiled run (with
    its exports) and a run of the same workload without a profiler as its reference, laid out as the
    job lays them out: collect states the slowdown of each rank's median iteration, and the median
    unprofiled one, from the two results files, and the report's verdict is re-based on the latter.
    A damaged reference file is one problem line naming it; the rest is collected, and the report
    says the slowdown is not measured."""
    from test_report_html import gpu_run

    exp = write_experiment(tmp_path / "exp.yaml", "seqpar", {"tool": "nsys"}, "h200")
    hpcprof("render", str(exp), "--site", "local", "-o", "r", cwd=tmp_path, check=True)
    nsys, base = (gpu_data / "run1" / "seqpar" / f"{name}_bfloat16_p2" / "seqpar.json" for name in ("nsys", "base"))
    exports = {f"rank{r}.sqlite": fixtures_dir / "nsys" / "h200_seqpar_bf16" / f"rank{r}.sqlite" for r in (0, 1)}
    runs = {}
    for run_id, reference in (("20261129-120000-aaaaaa", base.read_text()), ("20261129-120000-bbbbbb", '{"iterations": [')):
        runs[run_id] = run = gpu_run(tmp_path / "runs", tmp_path / "r", run_id, "nsys", exports, nsys)
        (run / "results" / c.REFERENCE_DIR).mkdir()
        (run / "results" / c.REFERENCE_DIR / "seqpar.json").write_text(reference)
    done = hpcprof("collect", "--workdir", str(tmp_path / "runs"), cwd=tmp_path)
    assert done.returncode == 3, done.stdout + done.stderr     # the damaged one
    good, damaged = runs.values()
    quiet, slowed = medians_from(base, "iterations", "iteration"), medians_from(nsys, "iterations", "iteration")
    headline = {n: v for n, v, _ in (read_headline(good) or pytest.fail("no headline")).metrics}
    assert headline[c.PROFILER_UNPROFILED_STEP.name] == pytest.approx(statistics.median(quiet.values()))
    assert headline[c.PROFILER_SLOWDOWN.name] == pytest.approx(max(100 * (slowed[r] / quiet[r] - 1) for r in (0, 1)))
    ranks = read_table(good, c.STEPS_PERTURBATION.name)
    assert ranks is not None and list(ranks["unprofiled_steps"]) == [100, 100] and list(ranks["profiled_steps"]) == [100, 100]
    said = [line for line in (done.stdout + done.stderr).splitlines() if "seqpar.json" in line]
    assert len(said) == 1 and said[0].startswith("20261129-120000-bbbbbb: ") and "unreadable JSON" in said[0], said
    assert f"{c.REFERENCE_DIR}/seqpar.json" in said[0]
    headline = {n: v for n, v, _ in (read_headline(damaged) or pytest.fail("no headline")).metrics}
    assert c.PROFILER_SLOWDOWN.name not in headline and "iteration.median" in headline
    assert read_table(damaged, c.STEPS_PERTURBATION.name) is None
    report = {run.name: " ".join(hpcprof("report", run.name, "--workdir", str(tmp_path / "runs"), cwd=tmp_path,
                                         check=True).stdout.split()) for run in (good, damaged)}
    assert "the slowdown nsys caused is not measured" in report[damaged.name]
    # the verdict re-based on the reference's step (hpcprof.report.limits)
    unprofiled = f"{statistics.median(quiet.values()):.2f} ms step without the profiler"
    assert unprofiled in report[good.name] and "without the profiler" not in report[damaged.name]


def local_site(tmp_path: Path, **paths: str) -> Path:
    """The shipped local site with `paths` added."""
    data = yaml.safe_load((REPO / "site_configs" / "local.yaml").read_text())
    data["paths"].update(paths)
    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump(data))
    return site


def medians_from(path: Path, key: str, phase: str) -> dict[int, float]:
    """Each rank's median of the counted, non-window iterations of `phase` in a workload's results
    file, read as JSON (not through collect)."""
    data = json.loads(path.read_text())
    times: dict[int, list[float]] = {}
    for row in data[key]:
        if row["phase"] == phase and row.get("counted", True) and not row.get("window", False):
            times.setdefault(row["rank"], []).append(row["time_ms"])
    return {rank: statistics.median(values) for rank, values in sorted(times.items())}


#: the profilers the real jobs run under -> the experiment's `profile:`: nsys 2022.4 with the reference
#: at its default (no export: this machine's nsys has no importer, it writes .qdstrm files), and
#: torch.profiler with the reference asked for (ddp: no iteration of its own is unprofiled)
PROFILES = {"nsys": {"tool": "nsys", "nsys": {"export_sqlite": False}}, "torch": {"tool": "torch", "reference": True}}


@pytest.mark.slow     # real 2-rank jobs, each workload run twice (the reference, then profiled)
@pytest.mark.parametrize(("kind", "tool"), [("seqpar", "nsys"), ("ddp", "nsys"), ("ddp", "torch")])
def test_collect_states_the_slowdown_against_the_reference_run(tmp_path: Path, kind: str, tool: str) -> None:
    """A real local job: the reference ran first with exit status 0 and wrote its results into
    results/reference/, the profiled run its own; collect states profiler.slowdown_pct with its
    interval, and profiler.unprofiled_step equals the median over ranks of each rank's median counted
    iteration in the reference's own results file (each rank's profiled median that of the profiled
    run's file); report, status and compare say it and its baseline."""
    if tool == "nsys" and not NSYS_2022.exists():
        pytest.skip("nsys 2022.4 not installed (tests/services/nsys.sh)")
    site = local_site(tmp_path, **({"nsys": str(NSYS_2022)} if tool == "nsys" else {}))
    exp = write_experiment(tmp_path / "exp.yaml", kind, PROFILES[tool])
    hpcprof("submit", str(exp), "--site-file", str(site), "--wait", cwd=tmp_path, check=True, timeout=600)
    [run] = [p.parent for p in (tmp_path / "hpcprof-runs").glob("*/*/config.json")]
    status = dict(line.split("=", 1) for line in (run / "status").read_text().splitlines())
    assert (status["reference_exit_code"], status["exit_code"]) == ("0", "0"), status
    assert sorted(p.name for p in (run / "profiles" / tool).glob("rank*"))       # the profiled run's
    name, key, phase = RESULTS[kind]
    profiled, reference = run / "results" / name, run / "results" / c.REFERENCE_DIR / name
    assert json.loads(profiled.read_text())[key] != json.loads(reference.read_text())[key]    # two runs, apart
    collect = hpcprof("collect", cwd=tmp_path, timeout=600)
    assert collect.returncode in (0, 3) and "Traceback" not in collect.stderr, collect.stderr
    headline = {n: v for n, v, _ in (read_headline(run) or pytest.fail("no headline")).metrics}
    quiet, slowed = medians_from(reference, key, phase), medians_from(profiled, key, phase)
    assert list(quiet) == [0, 1] and list(slowed) == [0, 1]
    assert headline[c.PROFILER_UNPROFILED_STEP.name] == pytest.approx(statistics.median(quiet.values()))
    ranks = read_table(run, c.STEPS_PERTURBATION.name)
    assert ranks is not None and list(ranks["rank"]) == [0, 1] and set(ranks["baseline"]) == {REFERENCE_RUN}
    assert list(ranks["unprofiled_ms"]) == pytest.approx(list(quiet.values()))
    assert list(ranks["profiled_ms"]) == pytest.approx(list(slowed.values()))
    worst = max(100 * (slowed[r] / quiet[r] - 1) for r in (0, 1))
    assert headline[c.PROFILER_SLOWDOWN.name] == pytest.approx(worst)
    assert headline[c.PROFILER_SLOWDOWN_LOW.name] <= worst <= headline[c.PROFILER_SLOWDOWN_HIGH.name]
    print(f"{kind} under {tool}: slowdown {worst:+.1f} % [{headline[c.PROFILER_SLOWDOWN_LOW.name]:+.1f}, "
          f"{headline[c.PROFILER_SLOWDOWN_HIGH.name]:+.1f}], unprofiled step {statistics.median(quiet.values()):.3f} ms")
    report = " ".join(hpcprof("report", run.name, cwd=tmp_path, check=True).stdout.split())
    assert "in the job's unprofiled reference run of the same workload (profile.reference)" in report
    assert "is not measured" not in report
    [row] = json.loads(hpcprof("status", run.name, "--format", "json", cwd=tmp_path, check=True).stdout)
    assert row["profiler"].endswith(f"{worst:+.1f} % [{headline[c.PROFILER_SLOWDOWN_LOW.name]:+.1f}, "
                                    f"{headline[c.PROFILER_SLOWDOWN_HIGH.name]:+.1f}]"), row
    compared = " ".join(hpcprof("compare", run.name, cwd=tmp_path, check=True).stdout.split())
    assert "in the job's unprofiled reference run of the same workload" in compared
