"""End to end on the local site: real mpiexec (the mpich wheel), 2 ranks."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hpcprof_cli import hpcprof
from sqlalchemy import create_engine, text


def write_experiment(path: Path, argv: list[str], extra: str = "") -> Path:
    path.write_text(f"name: t\nworkload:\n  kind: command\n  argv: {json.dumps(argv)}\n"
                    f"resources:\n  nodes: 1\n  ranks_per_node: 2\n{extra}")
    return path


def run_dirs(cwd: Path) -> list[Path]:
    return sorted(p.parent for p in (cwd / "hpcprof-runs").glob("*/*/config.json"))


def status_json(cwd: Path, *runs: str) -> list[dict]:
    return json.loads(hpcprof("status", *runs, "--format", "json", cwd=cwd, check=True).stdout)


def snapshot(run: Path, db: Path) -> tuple[dict[str, bytes], list[tuple]]:
    files = {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
    with create_engine(f"sqlite:///{db}").connect() as conn:
        rows = conn.execute(text("select run_id, metric, value, unit from run_metrics order by metric")).all()
        rows += conn.execute(text("select * from runs")).all()
    return files, [tuple(r) for r in rows]


@pytest.mark.slow
def test_two_ranks_complete_and_collect_is_idempotent(tmp_path: Path) -> None:
    exp = write_experiment(tmp_path / "exp.yaml", ["bash", "-c", 'echo "hello from $HPCPROF_RANK/$HPCPROF_LOCAL_RANK"'])
    hpcprof("submit", str(exp), "--site", "local", "--wait", cwd=tmp_path, check=True)
    [run] = run_dirs(tmp_path)
    for name in ("config.json", "job.sh", "rank_wrapper.sh", "DONE", "status", "logs/job.out"):
        assert (run / name).is_file(), name
    assert "hello from 0/0" in (run / "logs/rank0.log").read_text()
    assert "hello from 1/1" in (run / "logs/rank1.log").read_text()
    status = dict(line.split("=", 1) for line in (run / "status").read_text().splitlines())
    assert status["exit_code"] == "0" and int(status["end"]) >= int(status["start"])
    config = json.loads((run / "config.json").read_text())
    assert config["run_id"] == run.name and config["world_size"] == 2
    [row] = status_json(tmp_path)
    assert (row["state"], row["exit_code"]) == ("COMPLETED", 0)

    hpcprof("collect", cwd=tmp_path, check=True)
    from hpcprof.run.results import read_table

    manifest = read_table(run, "files_manifest")["path"].tolist()
    assert "logs/rank0.log" in manifest and "logs/rank1.log" in manifest
    db = tmp_path / "hpcprof-runs" / "hpcprof.db"
    first = snapshot(run, db)
    hpcprof("collect", cwd=tmp_path, check=True)
    assert snapshot(run, db) == first
    assert "COMPLETED" in hpcprof("report", cwd=tmp_path, check=True).stdout


def test_rank_exit_code_is_reported(tmp_path: Path) -> None:
    exp = write_experiment(tmp_path / "exp.yaml", ["bash", "-c", '[ "$HPCPROF_RANK" = 1 ] && exit 3; exit 0'])
    result = hpcprof("submit", str(exp), "--site", "local", "--wait", cwd=tmp_path, check=False)
    assert result.returncode == 1
    [row] = status_json(tmp_path)
    assert row["state"] == "FAILED" and row["exit_code"] == 3


def local_site_file(path: Path, edit: Callable[[str], str]) -> Path:
    """The local site's config, edited, as a site file."""
    path.write_text(edit((Path(__file__).parents[1] / "site_configs" / "local.yaml").read_text()))
    return path


def test_a_launcher_that_starts_no_rank_is_named_by_its_own_words(tmp_path: Path) -> None:
    """A job whose launcher fails before any rank starts (here Hydra, given a host file that does not
    exist) says what the launcher said, not only its exit code."""
    exp = write_experiment(tmp_path / "exp.yaml", ["true"])
    site = local_site_file(tmp_path / "site.yaml", lambda text: text + "  HYDRA_HOST_FILE: /nonexistent/hosts\n")
    result = hpcprof("submit", str(exp), "--site-file", str(site), "--wait", cwd=tmp_path, check=False)
    assert result.returncode == 1
    [row] = status_json(tmp_path)
    assert (row["state"], row["exit_code"]) == ("FAILED", 255)
    assert row["reason"].startswith("no rank started; the job log says: [mpiexec@")
    assert row["reason"].endswith("HYDU_parse_hostfile: unable to open host file: /nonexistent/hosts"), row["reason"]


def test_a_local_site_whose_mpiexec_is_another_flavour_is_refused_at_submit(tmp_path: Path) -> None:
    """The local site's launcher.flavor against what its mpiexec says it is (`--version`): a one-line
    error naming the field and the fix, nothing written, instead of a job the launcher refuses."""
    exp = write_experiment(tmp_path / "exp.yaml", ["true"])
    site = local_site_file(tmp_path / "site.yaml", lambda text: text.replace("flavor: auto", "flavor: openmpi"))
    result = hpcprof("submit", str(exp), "--site-file", str(site), cwd=tmp_path, check=False)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "launcher.flavor: openmpi, but " in result.stderr and "is MPICH (Hydra)'s mpiexec" in result.stderr
    assert "set launcher.flavor: hydra (or auto)" in result.stderr
    assert not (tmp_path / "hpcprof-runs").exists()


def test_the_local_sites_auto_flavour_is_what_its_mpiexec_says(tmp_path: Path) -> None:
    """`launcher.flavor: auto` (the shipped local site's): the job speaks the dialect of the mpiexec
    beside hpcprof's Python, the mpich wheel's Hydra (`-ppn`, `-genv`, SIGPIPE ignored around it;
    the runs themselves: test_two_ranks_complete_and_collect_is_idempotent)."""
    exp = write_experiment(tmp_path / "exp.yaml", ["true"])
    job = hpcprof("submit", str(exp), "--site", "local", "--dry-run", cwd=tmp_path, check=True).stdout
    assert " -n 2 -ppn 2 -genv TMPDIR " in job and "--map-by" not in job
    assert "trap '' PIPE" in job


@pytest.mark.parametrize(("command", "said"), [
    ("/bin/true", "launcher.flavor: auto, but `/bin/true --version` names none of MPICH (Hydra), Open MPI, Cray "
                  "PALS; set launcher.flavor to hydra, openmpi or pals in a site file (--site-file)"),
    ("/nonexistent/mpiexec", "launcher.command: /nonexistent/mpiexec is not a program here; install mpiexec, or set "
                             "launcher.command to its full path"),
])
def test_an_auto_flavour_that_cannot_be_told_is_one_line(tmp_path: Path, command: str, said: str) -> None:
    """`auto` with a launcher that names no flavour hpcprof knows, or is no program: one line naming the
    first cause's field, exit 2, nothing written."""
    exp = write_experiment(tmp_path / "exp.yaml", ["true"])
    site = local_site_file(tmp_path / "site.yaml", lambda text: text.replace("command: auto ", f"command: {command} "))
    result = hpcprof("submit", str(exp), "--site-file", str(site), cwd=tmp_path, check=False)
    assert (result.returncode, result.stderr.strip().splitlines()) == (2, [f"Error: site local: {said}"])
    assert not (tmp_path / "hpcprof-runs").exists()


@pytest.mark.slow
def test_background_run_can_be_cancelled(tmp_path: Path) -> None:
    exp = write_experiment(tmp_path / "exp.yaml", ["sleep", "120"])
    hpcprof("submit", str(exp), "--site", "local", cwd=tmp_path, check=True)
    [run] = run_dirs(tmp_path)
    deadline = time.monotonic() + 30
    while status_json(tmp_path, run.name)[0]["state"] != "RUNNING":
        assert time.monotonic() < deadline, "run never started"
        time.sleep(0.2)
    hpcprof("cancel", run.name, cwd=tmp_path, check=True)
    [row] = status_json(tmp_path, str(run))
    assert row["state"] == "CANCELLED"
    pid = json.loads((run / "job.pid").read_text())["pid"]
    ps = subprocess.run(["ps", "-o", "pid=,stat=", "-g", str(pid)], capture_output=True, text=True).stdout
    assert all(line.split()[1].startswith("Z") for line in ps.splitlines()), ps


def test_sweep_makes_one_run_per_point_and_db_url(tmp_path: Path) -> None:
    exp = write_experiment(tmp_path / "exp.yaml", ["true"],
                           "sweep:\n  resources.ranks_per_node: [1, 2]\n  env.X: [a, b]\n")
    db = tmp_path / "elsewhere.db"
    hpcprof("submit", str(exp), "--site", "local", "--wait", "--db", f"sqlite:///{db}", cwd=tmp_path, check=True)
    runs = run_dirs(tmp_path)
    assert len(runs) == 4 and len({r.name[:-5] for r in runs}) == 1
    sizes = sorted(json.loads((r / "config.json").read_text())["world_size"] for r in runs)
    assert sizes == [1, 1, 2, 2]
    with create_engine(f"sqlite:///{db}").connect() as conn:
        assert conn.execute(text("select count(*) from runs where state='COMPLETED'")).scalar() == 4
        assert conn.execute(text("select n_points from sweeps")).scalar() == 4


@pytest.mark.parametrize("bad", ["resources.nodes=0", "profile.tool=perf"])
def test_bad_override_writes_nothing(tmp_path: Path, bad: str) -> None:
    exp = write_experiment(tmp_path / "exp.yaml", ["true"])
    result = hpcprof("submit", str(exp), "--site", "local", "--set", bad, cwd=tmp_path, check=False)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and bad.split("=")[0] in result.stderr
    assert not (tmp_path / "hpcprof-runs").exists()


def test_hydra_mpiexec_runs_with_sigpipe_ignored_and_its_ranks_do_not(tmp_path: Path) -> None:
    """The local job starts MPICH's Hydra mpiexec with SIGPIPE ignored (it died of SIGPIPE now and then
    as a job ended, the job exiting 141: hpcprof.render.launchers.SIGPIPE_IGNORED); the ranks (their
    proxy's child) still get SIGPIPE's default action, and the job script itself after the launcher.
    Each rank prints the SigIgn mask of itself and of mpiexec (its proxy's parent) from /proc."""
    report = ('field() { sed -n "s/^$1:\\s*//p" /proc/$2/status; }; launcher=$(field PPid "$(field PPid $$)"); '
              'echo "rank $(field SigIgn $$) launcher $(field SigIgn $launcher) $(cat /proc/$launcher/comm)"')
    exp = write_experiment(tmp_path / "exp.yaml", ["bash", "-c", report])
    hpcprof("submit", str(exp), "--site", "local", "--wait", cwd=tmp_path, check=True)
    [run] = run_dirs(tmp_path)
    sigpipe = 1 << (13 - 1)
    for rank in (0, 1):
        log = (run / f"logs/rank{rank}.log").read_text()
        words = log.split()
        assert len(words) == 5 and words[0] == "rank" and words[2] == "launcher", log
        rank_mask, launcher_mask, launcher = int(words[1], 16), int(words[3], 16), words[4]
        assert launcher == "mpiexec" and launcher_mask & sigpipe and not rank_mask & sigpipe, log
    script = (run / "job.sh").read_text()
    assert script.index("trap '' PIPE") < script.index("rank_wrapper.sh") < script.index("trap - PIPE")
