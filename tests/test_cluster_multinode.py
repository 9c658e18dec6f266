"""Multi-node runs on a real Slurm of two nodes (tests/services/slurm-cluster.sh): each node a
slurmd in its own network and UTS namespace, so ranks see two hosts with their own names and
addresses. Through `hpcprof submit`: seqpar on 2 nodes x 2 ranks (gloo across the namespaces) with
srun (PMI2), with torchrun per node (srun starts the agents, c10d rendezvous on the first node) and
with MPICH's Hydra mpiexec across the allocation; rank selection across nodes under each; srun
with PMIx; and a node lost in the middle of a run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from hpcprof_cli import hpcprof
from slurm_cluster import poll

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "services" / "slurm-cluster.sh"
SITES = REPO / "tests" / "data" / "sites"
SITE = SITES / "slurm-cluster.yaml"
LAUNCHERS = {"srun": SITE, "torchrun": SITES / "slurm-cluster-torchrun.yaml", "hydra": SITES / "slurm-cluster-hydra.yaml"}
SEQPAR = REPO / "examples" / "seqpar_cpu.yaml"
CONF = Path("/var/lib/slurm-cluster/slurm.conf")

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def cluster() -> dict[str, str]:
    """The two-node cluster, started if needed (root); the environment that reaches it."""
    if os.geteuid() != 0:
        pytest.skip("the multi-node Slurm needs root (network namespaces): sudo bash tests/services/slurm-cluster.sh start")
    proc = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        pytest.fail(f"slurm-cluster.sh start failed: {(proc.stderr or proc.stdout)[-800:]}")
    return {**os.environ, "SLURM_CONF": str(CONF)}


def submit(env: dict[str, str], workdir: Path, *args: str, site: Path = SITE,
           experiment: Path = SEQPAR) -> tuple[str, int]:
    proc = hpcprof("submit", str(experiment), "--site-file", str(site), "--set", "resources.nodes=2",
                   *args, env=env, workdir=workdir)
    match = re.search(r"submitted (\S+) as (\S+)", proc.stderr)
    assert match, f"no submission (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return match[1], proc.returncode


def status(env: dict[str, str], workdir: Path, run_id: str) -> dict[str, Any]:
    proc = hpcprof("status", run_id, "--format", "json", env=env, workdir=workdir)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)
    return row


def run_dir(workdir: Path, run_id: str) -> Path:
    return workdir / "seqpar-cpu" / run_id


def profiled_ranks(path: Path) -> set[int]:
    """Ranks whose log says the wrapper started them under the profiler."""
    return {int(m[1]) for log in (path / "logs").glob("rank*.log")
            for m in re.finditer(r"hpcprof: rank (\d+) \(local \d+\) on \S+ runs under", log.read_text())}


#: profile.ranks of the rank-selection runs and the ranks each profiles
SELECTIONS = {"local:0": {0, 2}, "local:0+first-nodes:1": {0}}
#: the selection whose runs test_seqpar_on_two_nodes also reads (ranks 1-3 run as without a profiler)
ONE_PROFILED = "local:0+first-nodes:1"


@pytest.fixture(scope="module")
def queued(cluster: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], tuple[str, Path]]:
    """seqpar under each launcher with each rank selection, submitted at once (Slurm runs two side
    by side on the two nodes' CPUs): (launcher, profile.ranks) -> (run id, workdir)."""
    out = {}
    for ranks in SELECTIONS:
        for launcher, site in LAUNCHERS.items():
            workdir = tmp_path_factory.mktemp("runs")
            args = ("--set", "profile.tool=torch", "--set", f"profile.ranks={ranks}",
                    "--set", "workload.args.iterations=8")
            run_id, rc = submit(cluster, workdir, *args, site=site)
            assert rc == 0, (launcher, ranks)
            out[(launcher, ranks)] = (run_id, workdir)
    return out


def ended(env: dict[str, str], queued: dict[tuple[str, str], tuple[str, Path]], launcher: str,
          ranks: str) -> tuple[str, Path, dict[str, Any]]:
    """The queued run's id, workdir and final status row, once it ended."""
    run_id, workdir = queued[(launcher, ranks)]
    row = poll(lambda: status(env, workdir, run_id), lambda r: r["state"] not in ("PENDING", "RUNNING", "UNKNOWN"), 600)
    return run_id, workdir, row


@pytest.mark.parametrize(("launcher", "reported"), [("srun", "mpi"), ("torchrun", "torchrun"), ("hydra", "mpi")])
def test_seqpar_on_two_nodes(cluster: dict[str, str], queued: dict[tuple[str, str], tuple[str, Path]], launcher: str,
                             reported: str) -> None:
    """2 nodes x 2 ranks: the rank -> host map is the launcher's (block: ranks 0-1 on node1), the
    gloo rendezvous at $MASTER_ADDR (node1, from scontrol) is reached from both nodes (the run of
    ONE_PROFILED: its ranks 1-3 run as without a profiler)."""
    run_id, workdir, row = ended(cluster, queued, launcher, ONE_PROFILED)
    assert row["state"] == "COMPLETED", (row, (run_dir(workdir, run_id) / "logs" / "job.out").read_text()[-2000:])
    results = json.loads((run_dir(workdir, run_id) / "results" / "seqpar.json").read_text())
    hosts = {r["rank"]: r["host"] for r in results["ranks"]}
    assert hosts == {0: "node1", 1: "node1", 2: "node2", 3: "node2"}
    assert results["versions"]["launcher"] == reported and results["config"]["world_size"] == 4
    job = (run_dir(workdir, run_id) / "job.sh").read_text()
    assert 'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"' in job
    if launcher == "srun":
        collected = hpcprof("collect", run_id, env=cluster, workdir=workdir)
        assert collected.returncode == 0, collected.stderr


@pytest.mark.parametrize("launcher", ["srun", "torchrun", "hydra"])
@pytest.mark.parametrize("ranks", list(SELECTIONS))
def test_rank_selection_across_nodes(cluster: dict[str, str], queued: dict[tuple[str, str], tuple[str, Path]],
                                     launcher: str, ranks: str) -> None:
    expected = SELECTIONS[ranks]
    run_id, workdir, row = ended(cluster, queued, launcher, ranks)
    assert row["state"] == "COMPLETED", row
    path = run_dir(workdir, run_id)
    assert profiled_ranks(path) == expected
    traces = {int(m[1]) for p in (path / "profiles" / "torch").iterdir() if (m := re.search(r"rank(\d+)", p.name))}
    assert traces == expected


PMIX_HELLO = REPO / "tests" / "data" / "pmix_hello.yaml"


def test_srun_with_pmix(cluster: dict[str, str], tmp_path: Path) -> None:
    """srun --mpi=pmix (Slurm's pmix_v4 plugin): the wrapper takes each rank from PMIX_RANK, the
    ranks are spread over both nodes. (The PyPI MPICH wheel has no PMIx client, so MPI programs
    such as seqpar cannot run under it here: MPICH aborts with "unsupported PMI version PMIx".)"""
    plugins = subprocess.run(["srun", "--mpi=list"], capture_output=True, text=True, env=cluster, check=False)
    assert "pmix" in plugins.stdout + plugins.stderr, "Debian's slurm-wlm lists the pmix plugin"
    workdir = tmp_path / "runs"
    run_id, rc = submit(cluster, workdir, "--wait", site=SITES / "slurm-cluster-pmix.yaml", experiment=PMIX_HELLO)
    path = workdir / "pmix-hello" / run_id
    assert rc == 0, (path / "logs" / "job.out").read_text()[-2000:]
    seen = {}
    for rank in range(4):
        match = re.search(r"rank (\d+) pmix (\d+) on (\S+)", (path / "logs" / f"rank{rank}.log").read_text())
        assert match, rank
        seen[int(match[1])] = (int(match[2]), match[3])
    assert seen == {0: (0, "node1"), 1: (1, "node1"), 2: (2, "node2"), 3: (3, "node2")}


def test_node_lost_mid_run(cluster: dict[str, str], tmp_path: Path) -> None:
    """Every process of node2 (its slurmd, step daemon and ranks) killed while the run is in its
    loop: the run ends FAILED or NODE_FAIL with a reason, node1's rank logs stay, collect works."""
    workdir = tmp_path / "runs"
    run_id, rc = submit(cluster, workdir, "--set", "workload.args.iterations=100000",
                        "--set", "resources.walltime='00:03:00'")
    assert rc == 0
    path = run_dir(workdir, run_id)
    poll(lambda: status(cluster, workdir, run_id)["state"], lambda s: s == "RUNNING", 120)
    poll(lambda: (path / "logs" / "rank2.log").exists(), bool, 60)
    time.sleep(8)                                 # ranks past their setup, in the loop
    pids = subprocess.run(["ip", "netns", "pids", "hpn2"], capture_output=True, text=True, check=True).stdout.split()
    subprocess.run(["kill", "-9", *pids], check=False)
    try:
        final = poll(lambda: status(cluster, workdir, run_id), lambda r: r["state"] not in ("PENDING", "RUNNING"), 180)
    finally:
        subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, timeout=300, check=False)  # node2 back
    assert final["state"] in ("FAILED", "NODE_FAIL"), final
    assert final["reason"] or final["exit_code"], final
    assert (path / "logs" / "rank0.log").exists() and (path / "logs" / "rank1.log").exists()
    collected = hpcprof("collect", run_id, env=cluster, workdir=workdir)
    assert collected.returncode in (0, 3), collected.stderr
