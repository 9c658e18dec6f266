"""The commands that list or render start without the libraries they do not use (the
goal: <= 10x `python -c pass`; benchmarks/startup.py times them): each runs in a fresh interpreter and
names the heavy modules it imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hpcprof_cli import hpcprof

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("pandas", "numpy", "torch", "sqlalchemy", "jinja2", "rich", "msgspec", "yaml")
SCRIPT = f"""
import contextlib, io, json, sys
HEAVY = {HEAVY!r}
from hpcprof.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        main(sys.argv[1:], standalone_mode=False)
    except SystemExit as exc:
        assert not exc.code, exc.code
print(json.dumps(sorted(m for m in HEAVY if m in sys.modules)))
"""


def heavy_imports(*argv: str, cwd: Path) -> set[str]:
    """The HEAVY modules `hpcprof ARGV` imported (it must succeed)."""
    proc = subprocess.run([sys.executable, "-c", SCRIPT, *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout))


@pytest.fixture(scope="module")
def one_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workdir holding one finished local run, in its store."""
    workdir = tmp_path_factory.mktemp("startup") / "runs"
    hpcprof("submit", str(REPO / "examples" / "command_hello.yaml"), "--site", "local", "--wait", workdir=workdir,
            check=True)
    return workdir


def test_help_imports_no_library_but_click(tmp_path: Path) -> None:
    assert heavy_imports("--help", cwd=tmp_path) == set()


def test_sites_lists_without_jinja_sqlalchemy_or_pandas(tmp_path: Path) -> None:
    assert heavy_imports("sites", cwd=tmp_path) == {"msgspec", "yaml", "rich"}  # validation, YAML, its table


def test_render_to_a_directory_without_rich_sqlalchemy_or_pandas(tmp_path: Path) -> None:
    used = heavy_imports("render", str(REPO / "examples" / "seqpar_polaris.yaml"), "--site", "polaris", "--set",
                         "resources.account=PROJECT", "-o", str(tmp_path / "job"), cwd=tmp_path)
    assert used == {"msgspec", "yaml", "jinja2"}
    assert (tmp_path / "job" / "p000" / "job.sh").is_file()  # a sweep of two points


def test_status_of_ended_stored_runs_opens_no_store(one_run: Path, tmp_path: Path) -> None:
    """Submit --wait stored the final state and noted it in the run directory: status reads the
    notes alone (no SQLAlchemy, no rich for JSON, no config models)."""
    assert heavy_imports("status", "--workdir", str(one_run), "--format", "json", cwd=tmp_path) == set()


def test_status_opens_the_store_for_a_state_it_does_not_hold(one_run: Path, tmp_path: Path) -> None:
    (note,) = one_run.glob("*/*/state.stored")
    note.unlink()  # as if the store had not recorded the end yet
    assert heavy_imports("status", "--workdir", str(one_run), "--format", "json", cwd=tmp_path) == {"sqlalchemy"}
    assert note.read_text().splitlines()[0] == "COMPLETED 0"  # recorded, and noted again


def test_status_shows_how_a_run_was_collected_without_the_store(one_run: Path, tmp_path: Path) -> None:
    hpcprof("collect", workdir=one_run, check=True)
    (note,) = one_run.glob("*/*/collect.stored")
    assert note.read_text() == "complete"
    assert heavy_imports("status", "--workdir", str(one_run), "--format", "json", cwd=tmp_path) == set()
    rows = json.loads(hpcprof("status", "--format", "json", workdir=one_run, check=True).stdout)
    assert [row["collected"] for row in rows] == ["complete"]
    note.write_bytes(b"\xff\xfe")                                       # a damaged note is named
    rows = json.loads(hpcprof("status", "--format", "json", workdir=one_run, check=True).stdout)
    run_id = note.parent.name
    assert [row["collected"] for row in rows] == [f"{note} is damaged; collect the run again: hpcprof collect {run_id}"]
    hpcprof("collect", run_id, workdir=one_run, check=True)
    assert note.read_text() == "complete"


PROBE = """
import gc, json, sys
import hpcprof.cli.sites as sites
from hpcprof.__main__ import main
seen = {}
listed = sites.sites.callback
def probe(*args, **kwargs):
    seen.update(enabled=gc.isenabled(), frozen=gc.get_freeze_count(), modules=len(sys.modules))
    return listed(*args, **kwargs)
sys.argv = ["hpcprof", *sys.argv[1:]]
sites.sites.callback = probe
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
print(json.dumps(seen), file=sys.stderr)
"""


def test_the_program_freezes_what_start_up_made_and_collects_for_the_command(tmp_path: Path) -> None:
    """`hpcprof` (hpcprof.__main__) pauses the cyclic collector while it starts; once the command is
    resolved the objects made so far are frozen and the collector runs again for the command's own
    work (its garbage collected as before)."""
    proc = subprocess.run([sys.executable, "-c", PROBE, "sites"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stderr.splitlines()[-1])
    assert seen["enabled"] is True
    assert seen["frozen"] > 10 * seen["modules"]  # the modules, their classes and functions
    assert "polaris" in proc.stdout


def test_the_command_line_called_in_a_process_freezes_nothing(tmp_path: Path) -> None:
    """`hpcprof.cli.main` called from Python (the tests, a notebook) leaves the caller's collector as
    it was: nothing frozen, which would never be collected."""
    import gc

    from hpcprof.cli import main

    frozen = gc.get_freeze_count()
    with pytest.raises(SystemExit) as exited:
        main(["sites"])
    assert exited.value.code == 0
    assert gc.isenabled() and gc.get_freeze_count() == frozen


ENV_PROBE = """
import atexit, json, os, sys
from hpcprof.__main__ import main

def said():
    import numpy._core.multiarray as multiarray
    names = ("OPENBLAS_NUM_THREADS", "NUMPY_MADVISE_HUGEPAGE")
    print(json.dumps({"env": {n: os.environ.get(n) for n in names}, "hugepage": multiarray._get_madvise_hugepage()}),
          file=sys.stderr)

atexit.register(said)
sys.argv = ["hpcprof", *sys.argv[1:]]
main()
"""


def numpy_state(*argv: str, cwd: Path, **env: str) -> dict[str, object]:
    """The environment `hpcprof ARGV` (hpcprof.__main__) ran in, and whether numpy asked for huge pages in it."""
    base = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "NUMPY_MADVISE_HUGEPAGE")}
    proc = subprocess.run([sys.executable, "-c", ENV_PROBE, *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False, env={**base, **env})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stderr.splitlines()[-1])  # type: ignore[no-any-return]


def test_the_nsys_commands_run_numpy_without_huge_pages_unless_the_user_asks(tmp_path: Path) -> None:
    """`hpcprof nsys ...` sets OPENBLAS_NUM_THREADS=1 and NUMPY_MADVISE_HUGEPAGE=0 for itself (numpy then
    asks the kernel for no transparent huge pages); `hpcprof trace ...` only the first; a value the
    user set is kept."""
    plain = subprocess.run([sys.executable, "-c", "import numpy._core.multiarray as m; print(m._get_madvise_hugepage())"],
                           capture_output=True, text=True, check=True,
                           env={k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}).stdout.strip()
    nsys = numpy_state("nsys", "stats", "--help", cwd=tmp_path)
    assert nsys == {"env": {"OPENBLAS_NUM_THREADS": "1", "NUMPY_MADVISE_HUGEPAGE": "0"}, "hugepage": False}
    trace = numpy_state("trace", "all", "--help", cwd=tmp_path)
    assert trace == {"env": {"OPENBLAS_NUM_THREADS": "1", "NUMPY_MADVISE_HUGEPAGE": None}, "hugepage": plain == "True"}
    mine = numpy_state("nsys", "stats", "--help", cwd=tmp_path, NUMPY_MADVISE_HUGEPAGE="1", OPENBLAS_NUM_THREADS="4")
    assert mine == {"env": {"OPENBLAS_NUM_THREADS": "4", "NUMPY_MADVISE_HUGEPAGE": "1"}, "hugepage": True}
