"""The rendered side of an experiment's `forensics:` block (hpcprof.config.forensics): the
variables the job and rank wrapper templates get, and the start-up hook's files that go into the
run directory (`inject/`, from hpcprof/inject)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hpcprof.config.directives import walltime_seconds
from hpcprof.config.experiment import Point
from hpcprof.config.forensics import POLL_SECONDS, ForensicsConfig
from hpcprof.config.site import SiteConfig
from hpcprof.render.steps import steps_env

#: the start-up hook's modules, copied into a run's inject/ directory (the forensics', the step hook's where armed)
INJECT_DIR = Path(__file__).resolve().parents[1] / "inject"
INJECT_FILES = ("sitecustomize.py", "_hpcprof_files.py", "_hpcprof_forensics.py", "_hpcprof_memory.py")
#: the step hook and what it arms: the memory recorder, the stack sampler over the window
STEPS_FILES = ("_hpcprof_steps.py", "_hpcprof_memory.py", "_hpcprof_sampler.py")


def inject_files(point: Point) -> dict[str, str]:
    """The run's inject/ files (relative path -> text): sitecustomize with the forensics module and the
    step hook's, each where it is armed; none when neither is."""
    names = list(dict.fromkeys([*(INJECT_FILES if point.experiment.forensics.enabled else ()),
                                *(STEPS_FILES if steps_env(point) else ())]))
    if names and names[0] != INJECT_FILES[0]:
        names[:0] = INJECT_FILES[:2]    # the hook and what its modules share
    return {f"inject/{name}": (INJECT_DIR / name).read_text() for name in names}


def forensics_env(config: ForensicsConfig, world_size: int, run_dir: Path) -> dict[str, str]:
    """What the rank wrapper sets where unset (besides the start-up hook first on PYTHONPATH)."""
    trace_file = str(run_dir / "forensics" / "fr_nccl_rank")  # PyTorch appends the rank
    return {
        "HPCPROF_FORENSICS": "1",
        "HPCPROF_FORENSICS_POLL": f"{POLL_SECONDS:g}",
        # the rank whose exception asks the others to dump waits for them; alone, there is no one to wait for
        "HPCPROF_FORENSICS_WAIT": f"{2 * POLL_SECONDS + 0.5:g}" if world_size > 1 else "0",
        # torch >= 2.8's names (earlier ones: the start-up hook copies them to the NCCL names, which
        # torch 2.13 calls deprecated in a warning on every rank)
        "TORCH_FR_BUFFER_SIZE": str(config.buffer),
        "TORCH_FR_DUMP_TEMP_FILE": trace_file,
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
    }


def forensics_context(point: Point, site: SiteConfig, run_dir: Path) -> dict[str, Any]:
    """`forensics_env` (forensics_env(); empty: forensics off), `forensics_signal` (Slurm: seconds
    before the walltime of `--signal=B:USR1@N`; 0: none) and `forensics_timer` (seconds after the
    job starts at which it warns itself; 0: none)."""
    config = point.experiment.forensics
    if not config.enabled:
        return {"forensics_env": {}, "forensics_signal": 0, "forensics_timer": 0}
    walltime = walltime_seconds(point.walltime)
    lead = max(1, min(config.warning_seconds, walltime // 2))
    env = forensics_env(config, point.world_size, run_dir)
    own_signal = site.scheduler == "slurm" and not any(o.startswith("--signal") for o in site.sbatch_options)
    return {"forensics_env": env, "forensics_signal": lead if own_signal else 0,
            "forensics_timer": 0 if own_signal else walltime - lead}
