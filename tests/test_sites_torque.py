"""A site with `scheduler: torque`: the schema takes every name of the scheduler registry (and only
those), a torque site renders Torque's job script (#PBS -l nodes=N:ppn=M) checked like PBS's, and
on the real local Slurm a run goes through Slurm's Torque wrappers (qsub, qstat) end to end."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hpcprof_cli import hpcprof
from slurm_cluster import poll

from hpcprof.config.directives import check_rendered
from hpcprof.config.schedulers import REGISTRY, SCHEDULER_NAMES
from hpcprof.config.site import SiteConfig, load_site_file
from hpcprof.core.errors import UserError
from hpcprof.core.models import validate
from hpcprof.render.launchers import launch_argv
from hpcprof.schedulers import get_scheduler

REPO = Path(__file__).resolve().parents[1]
HELLO = REPO / "examples" / "command_hello.yaml"
TORQUE_SITE = REPO / "site_configs" / "torque-local.yaml"
#: the directive prefix of each dialect (hpcprof.config.schedulers), as the scheduler classes write it
PREFIX = {"pbs": "#PBS", "slurm": "#SBATCH", None: None}


def site(scheduler: str, **extra: object) -> SiteConfig:
    data = {"name": "s", "scheduler": scheduler, "launcher": {"kind": "srun"}, **extra}
    return validate(SiteConfig, data, "site s")


def test_the_schema_takes_every_registered_scheduler_and_no_other() -> None:
    assert {"local", "slurm", "pbs", "torque", "kubernetes"} <= set(SCHEDULER_NAMES)
    for name, entry in REGISTRY.items():
        scheduler = get_scheduler(name)
        assert scheduler.name == name and scheduler.directive == PREFIX[entry.dialect]
        if name != "kubernetes":  # a kubernetes site needs its kubernetes: block
            assert site(name).scheduler == name
    with pytest.raises(UserError, match=re.escape(f"'nosuch' is not a scheduler; use one of {', '.join(SCHEDULER_NAMES)}")):
        site("nosuch")


def test_torque_directive_fields_are_checked_like_pbs() -> None:
    """Torque writes #PBS lines: a ',' in the account would start another resource there too."""
    with pytest.raises(UserError, match="field 'defaults.account': .*cannot go into a torque directive"):
        site("torque", defaults={"account": "proj,walltime=99:00:00"})


def test_torque_site_renders_torques_job_script(tmp_path: Path) -> None:
    proc = hpcprof("render", str(HELLO), "--site", "torque-local", "--set", "resources.walltime=00:07:00",
                   "-o", str(tmp_path / "run"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "qsub " in proc.stdout + proc.stderr  # the by-hand submit command is Torque's
    script = (tmp_path / "run" / "job.sh").read_text()
    directives = [line for line in script.splitlines() if line.startswith("#PBS")]
    assert directives == ["#PBS -N hello", "#PBS -l nodes=1:ppn=2", "#PBS -l walltime=00:07:00", "#PBS -j oe",
                          f"#PBS -o {tmp_path / 'run' / 'logs' / 'job.out'}"]
    assert re.search(r"^srun -N 1 -n 2 .*--mpi=pmi2 \"\$RUN_DIR/rank_wrapper.sh\"", script, re.MULTILINE)
    assert 'hp_nodes=$(sort -u "$PBS_NODEFILE" | wc -l)' in script


def test_torque_rendered_directives_are_read_back(tmp_path: Path) -> None:
    """check_rendered reads Torque's `-l nodes=N:ppn=M` and walltime back, as it reads PBS's select."""
    hpcprof("render", str(HELLO), "--site", "torque-local", "-o", str(tmp_path / "run"), cwd=tmp_path, check=True)
    script = (tmp_path / "run" / "job.sh").read_text()
    check_rendered("torque", script, "00:10:00", 1, "run")  # as rendered: within the site
    with pytest.raises(UserError, match="rendered node count 3 exceeds the site maximum 2"):
        check_rendered("torque", script.replace("nodes=1:ppn=2", "nodes=3:ppn=2"), None, 2, "run")
    with pytest.raises(UserError, match="rendered walltime 00:10:00 exceeds the site maximum 00:05:00"):
        check_rendered("torque", script, "00:05:00", None, "run")
    with pytest.raises(UserError, match="sets the walltime 2 times"):
        check_rendered("torque", script + "#PBS -l walltime=01:00:00\n", None, None, "run")


def test_multinode_torchrun_on_torque_starts_agents_with_mpiexec() -> None:
    """torchrun's per-node agents: srun on Slurm, mpiexec on PBS and Torque."""
    torque = site("torque", launcher={"kind": "torchrun"})
    assert launch_argv(torque, 2, 4)[:5] == ["mpiexec", "-n", "2", "--ppn", "1"]
    assert launch_argv(site("slurm", launcher={"kind": "torchrun"}), 2, 4)[0] == "srun"


def test_torque_array_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    (tmp_path / "sweep.yaml").write_text(HELLO.read_text() + "sweep: {env.POINT: ['1', '2']}\n")
    proc = hpcprof("submit", "sweep.yaml", "--site", "torque-local", "--array", workdir=tmp_path / "runs")
    assert proc.returncode == 2
    assert "--array: the torque scheduler runs no job arrays" in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_shipped_torque_site_is_valid() -> None:
    assert load_site_file(TORQUE_SITE).scheduler == "torque"


@pytest.mark.torque
@pytest.mark.usefixtures("torque_cluster")
def test_submit_through_a_torque_site(tmp_path: Path) -> None:
    """`hpcprof submit --site torque-local`: qsub, the rendered Torque script on Slurm (PBS_NODEFILE from
    generate_pbs_nodefile), both ranks ran, and `status` settles COMPLETED with exit code 0."""
    workdir = tmp_path / "runs"
    proc = hpcprof("submit", str(HELLO), "--site", "torque-local", workdir=workdir, timeout=120)
    assert proc.returncode == 0, proc.stderr
    match = re.search(r"submitted (\S+) as (\S+)", proc.stderr)
    assert match, proc.stderr
    run = workdir / "hello" / match[1]
    poll(lambda: (run / "DONE").exists(), bool, 90)
    status = hpcprof("status", match[1], "--format", "json", workdir=workdir, check=True)
    row = yaml.safe_load(status.stdout)[0]
    assert (row["state"], row["exit_code"], row["job_id"]) == ("COMPLETED", 0, match[2])
    out = (run / "logs" / "job.out").read_text()
    assert sorted(re.findall(r"rank (\d) of run", out)) == ["0", "1"], out
    assert "nodes=1" in (run / "status").read_text().splitlines()
