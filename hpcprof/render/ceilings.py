"""The experiment's `ceilings:` in the job: the `hpcprof bench ceilings` command its ranks run after
the workload, through the same launcher and rank wrapper (unprofiled), in the same allocation.

Every size on the command line is re-written from its parsed numbers (`GemmSpec.text`,
`CollectiveSpec.text`), so the config's text never reaches the job script as written.
"""

from __future__ import annotations

from hpcprof.config.experiment import CeilingsConfig, Point
from hpcprof.core.errors import UserError
from hpcprof.core.models import dump
from hpcprof.workloads.ceiling_specs import check_fits, default_specs, parse_collective, parse_gemm

#: the rank wrapper's first argument that runs the command unprofiled (templates/rank_wrapper.sh.j2)
UNPROFILED = "--hpcprof-unprofiled"


def ceilings_argv(point: Point, python: str, runs_containers: bool, where: str = "") -> list[str]:
    """What each rank runs after the workload for `ceilings:` ([] when off): `python -m hpcprof
    bench ceilings` with the configured sizes, else the workload's (hpcprof.workloads.ceiling_specs)."""
    config = point.experiment.ceilings
    if config is False:
        return []
    if runs_containers:
        raise UserError(f"{where or 'experiment'}: field 'ceilings': not supported where the scheduler runs the "
                        "containers (Kubernetes); run `hpcprof bench ceilings` as a workload of its own instead")
    config = config if isinstance(config, CeilingsConfig) else CeilingsConfig()
    gemms = [parse_gemm(text) for text in config.gemm]
    collectives = [parse_collective(text) for text in config.collective]
    if not gemms and not collectives:
        args = dump(point.workload_args) if point.workload_args is not None else {}
        gemms, collectives = default_specs(point.experiment.workload.kind, args, point.world_size)
    for spec in collectives:
        try:
            check_fits(spec, point.world_size)
        except ValueError as exc:
            raise UserError(f"{where or 'experiment'}: field 'ceilings.collective': {spec.text()}: {exc}") from None
    argv = [python, "-m", "hpcprof", "bench", "ceilings", "--iters", str(config.iters), "--warmup", str(config.warmup)]
    argv += [token for spec in gemms for token in ("--gemm", spec.text())]
    argv += [token for spec in collectives for token in ("--collective", spec.text())]
    return argv
