"""What every rank's environment gets besides the launcher's own (templates/rank_wrapper.sh.j2):
PyTorch's env:// rendezvous variables, and the GPUs it sees.

Rendezvous: RANK and LOCAL_RANK are the rank variables the wrapper read from the launcher;
WORLD_SIZE and LOCAL_WORLD_SIZE the ranks hpcprof asked the launcher for; MASTER_ADDR the
allocation's first host (on one node, 127.0.0.1; the PBS, Slurm and Torque job scripts export the
first host of the job before the launcher starts, and a rank elsewhere reads $PBS_NODEFILE or
$SLURM_JOB_NODELIST); MASTER_PORT the run's port (a hash of the run id, below the kernel's
ephemeral ports: hpcprof.render.job.MASTER_PORTS). Each only where unset: torchrun sets its own.
`dist.init_process_group(backend)` with env:// then works unchanged under every launcher.

GPUs (`gpu_affinity`, the experiment's, else the site's): `identity` and `reverse` narrow
CUDA_VISIBLE_DEVICES to the rank's one GPU (local rank r: GPU r, or GPU n-1-r), so that cuda:0
is its GPU (ALCF's and NERSC's affinity scripts); `local-rank` shows the rank every GPU of the
node, ordered so that cuda:LOCAL_RANK is the GPU the site's convention gives it (torchrun,
Lightning and HF scripts call torch.cuda.set_device(LOCAL_RANK)); `none` leaves
CUDA_VISIBLE_DEVICES alone. Under a torchrun launcher an experiment that does not choose gets
`local-rank` where the site narrows: torchrun's workers pick their GPU by LOCAL_RANK, and rank 1
of a narrowed node would fail with "invalid device ordinal". Each rank's log says what it sees.
"""

from __future__ import annotations

from typing import Any

from hpcprof.config.experiment import Point
from hpcprof.config.site import SiteConfig, resolve_affinity


def gpu_affinity(point: Point, site: SiteConfig) -> str:
    """The rank's GPU convention (see the module)."""
    return resolve_affinity(point.experiment.gpu_affinity, site.gpu_affinity, site.launcher.kind)


def rank_env_context(point: Point, site: SiteConfig) -> dict[str, Any]:
    """`gpu_affinity`, `gpu_order` (the node's GPUs in the order `local-rank` shows them; '' where
    CUDA_VISIBLE_DEVICES is not set so), `gpu_note` (what the rank's log line adds) and
    `master_addr_local` (true: every rank on one node, MASTER_ADDR 127.0.0.1)."""
    affinity = gpu_affinity(point, site)
    gpus = site.node.gpus
    order = ",".join(str(g) for g in range(gpus - 1, -1, -1)) \
        if affinity == "local-rank" and site.gpu_affinity == "reverse" else ""
    note = {"identity": "; cuda:0 is its GPU, a program that picks cuda:LOCAL_RANK needs gpu_affinity: local-rank",
            "reverse": "; cuda:0 is its GPU, a program that picks cuda:LOCAL_RANK needs gpu_affinity: local-rank",
            "local-rank": "; cuda:LOCAL_RANK is its GPU"}.get(affinity, "")
    return {"gpu_affinity": affinity, "gpu_order": order, "gpu_note": note,
            "master_addr_local": point.experiment.resources.nodes == 1}
