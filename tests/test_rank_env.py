"""The rank environment every launcher's ranks get (hpcprof.render.rank_env): PyTorch's env://
variables where the launcher sets none, the allocation's first host, and the GPUs a rank sees under
each `gpu_affinity`, with the line its log says it in. The rendered wrapper runs in bash with each
launcher's variables, as tests/test_wrapper.py does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_wrapper import LAUNCHERS, run_ranks, site_with_tools, tools  # noqa: F401  (tools: a fixture)

from hpcprof.config.experiment import Experiment, Point
from hpcprof.config.site import SiteConfig
from hpcprof.core.models import dump, validate
from hpcprof.render.job import render_point, template_dirs, write_run

SHOW = ('printf "%s\\n" "${RANK-} ${WORLD_SIZE-} ${LOCAL_RANK-} ${LOCAL_WORLD_SIZE-} ${MASTER_ADDR-} ${MASTER_PORT-} '
        '${CUDA_VISIBLE_DEVICES-unset}" > "$HPCPROF_RUN_DIR/results/env.$HPCPROF_RANK"\n')
#: what each launcher's job gives a rank beside its rank variables (the batch job scripts export MASTER_*)
ALLOCATION = {"pals": {"PBS_NODEFILE": "NODEFILE"}, "srun-pmi2": {"SLURM_JOB_NODELIST": "nid[004-005]"},
              "srun-pmix": {"SLURM_JOB_NODELIST": "nid[004-005]"},
              "mpiexec-in-slurm": {"SLURM_JOB_NODELIST": "gpu7,gpu9"},
              "torchrun": {"MASTER_ADDR": "agent-host", "MASTER_PORT": "29500", "LOCAL_WORLD_SIZE": "2"}}
FIRST_HOST = {"pals": "x3001c0s13b0n0", "srun-pmi2": "nid004", "srun-pmix": "nid004", "mpiexec-in-slurm": "gpu7",
              "torchrun": "agent-host", "hydra": "", "openmpi": ""}


def make_run(site: SiteConfig, run_dir: Path, nodes: int, ranks_per_node: int, **experiment: Any) -> Path:
    """Render and write one run of `true` (experiment fields beside the workload and resources)."""
    exp = validate(Experiment, {"name": "env", "workload": {"kind": "command", "argv": ["true"]},
                                "resources": {"nodes": nodes, "ranks_per_node": ranks_per_node}, **experiment},
                   "test experiment")
    point = Point(index=0, params={}, experiment=exp, ranks_per_node=ranks_per_node, walltime="00:10:00")
    return write_run(render_point(point, site, run_dir, run_dir.name, template_dirs(site, None)))


def seen(run_dir: Path) -> dict[int, list[str]]:
    return {int(p.suffix[1:]): p.read_text().rstrip("\n").split(" ") for p in (run_dir / "results").glob("env.*")}


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_env_rendezvous_under_every_launcher(launcher: str, tools: Path, tmp_path: Path) -> None:  # noqa: F811
    """2 nodes x 2 ranks: RANK and LOCAL_RANK from the launcher's variables, the sizes hpcprof asked
    for, the first host of the allocation, the run's port; torchrun's own values stay."""
    (tmp_path / "NODEFILE").write_text("x3001c0s13b0n0\nx3001c0s13b0n0\nx3001c0s19b0n0\n")
    run_dir = make_run(site_with_tools(tools), tmp_path / "run", nodes=2, ranks_per_node=2)
    app = tmp_path / "show.sh"
    app.write_text(SHOW)
    extra = {k: str(tmp_path / v) if v == "NODEFILE" else v for k, v in ALLOCATION.get(launcher, {}).items()}
    run_ranks(run_dir, app, [{**LAUNCHERS[launcher](r, r % 2), **extra} for r in range(4)])
    port = next(line for line in (run_dir / "rank_wrapper.sh").read_text().splitlines()
                if "export MASTER_PORT=" in line).rsplit("=", 1)[1]
    world = "12" if launcher == "torchrun" else "4"      # torchrun's WORLD_SIZE is its own
    for rank, values in seen(run_dir).items():
        expected = [str(rank), world, str(rank % 2), "2", FIRST_HOST[launcher],
                    "29500" if launcher == "torchrun" else port, "unset"]
        assert values == expected, launcher


def test_the_rendezvous_port_is_never_one_the_kernel_hands_out(tools: Path, tmp_path: Path) -> None:  # noqa: F811
    """MASTER_PORT lies below this machine's ephemeral ports (the kernel's own range, read here):
    under load, mpiexec's PMI listener was once given a run's port, rank 0's TCPStore could not
    bind it and rank 1 waited on Hydra's socket until the test's timeout."""
    ephemeral = Path("/proc/sys/net/ipv4/ip_local_port_range")
    low = int(ephemeral.read_text().split()[0]) if ephemeral.is_file() else 32768
    site = site_with_tools(tools)
    ports = [int(next(line for line in (make_run(site, tmp_path / f"run{i}", 1, 2) / "rank_wrapper.sh")
                      .read_text().splitlines() if "export MASTER_PORT=" in line).rsplit("=", 1)[1])
             for i in range(40)]
    assert len(set(ports)) > 30 and all(20000 <= port < low for port in ports), sorted(ports)


def gpu_site(tools: Path, affinity: str, launcher: str = "mpiexec") -> SiteConfig:  # noqa: F811
    data = dump(site_with_tools(tools, node={"gpus": 4, "cores": 32, "ranks_per_node": 4}, gpu_affinity=affinity))
    if launcher == "torchrun":
        data["launcher"] = {"kind": "torchrun", "command": "torchrun"}
    return validate(SiteConfig, data, "test site")


@pytest.mark.parametrize(("site_affinity", "launcher", "experiment", "devices", "note"), [
    ("reverse", "mpiexec", None, ["3", "2", "1", "0"], "cuda:0 is its GPU"),
    ("identity", "mpiexec", None, ["0", "1", "2", "3"], "cuda:0 is its GPU"),
    ("reverse", "mpiexec", "local-rank", ["3,2,1,0"] * 4, "cuda:LOCAL_RANK is its GPU"),
    ("identity", "mpiexec", "local-rank", ["unset"] * 4, "cuda:LOCAL_RANK is its GPU"),
    ("identity", "torchrun", None, ["unset"] * 4, "gpu_affinity local-rank"),    # torchrun's convention
    ("reverse", "torchrun", "reverse", ["3", "2", "1", "0"], "gpu_affinity reverse"),
    ("reverse", "mpiexec", "none", ["unset"] * 4, "gpu_affinity none)"),
])
def test_the_gpus_a_rank_sees(site_affinity: str, launcher: str, experiment: str | None, devices: list[str],
                              note: str, tools: Path, tmp_path: Path) -> None:  # noqa: F811
    """Both conventions run unchanged: a narrowed CUDA_VISIBLE_DEVICES (cuda:0 is the rank's GPU) and
    `local-rank` (cuda:LOCAL_RANK is: all GPUs, in the site's order); each rank's log says which."""
    site = gpu_site(tools, site_affinity, launcher)
    extra = {} if experiment is None else {"gpu_affinity": experiment}
    run_dir = make_run(site, tmp_path / "run", 1, 4, **extra)
    app = tmp_path / "show.sh"
    app.write_text(SHOW)
    run_ranks(run_dir, app, [LAUNCHERS["torchrun" if launcher == "torchrun" else "pals"](r, r) for r in range(4)])
    assert [seen(run_dir)[r][-1] for r in range(4)] == devices
    for rank in range(4):
        log = (run_dir / "logs" / f"rank{rank}.log").read_text()
        line = next(line for line in log.splitlines() if "sees GPU(s)" in line)
        assert note in line and devices[rank].replace("unset", "all of the node") in line
