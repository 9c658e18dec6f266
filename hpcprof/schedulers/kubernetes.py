"""Kubernetes through a kubeflow MPIJob (v2beta1): `kubectl apply` the run's mpijob.yaml, state
from the MPIJob's status conditions (`kubectl get -o json`), `kubectl delete`.

The launcher pod runs the run's job.sh (the same script a local run uses: status file, mpirun,
DONE) from the run directory on a PVC; hpcprof sees that PVC at the same path (`mount_path`),
so `hpcprof collect` reads the run as on a cluster.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2
import yaml

from hpcprof.config.container import ContainerConfig, KubernetesConfig
from hpcprof.config.site import SiteConfig, walltime_seconds
from hpcprof.core.errors import UserError
from hpcprof.schedulers.base import (
    COMPLETED,
    FAILED,
    PENDING,
    RUNNING,
    UNKNOWN,
    Job,
    JobState,
    Scheduler,
    no_dependencies,
    run_command,
)

MANIFEST_TEMPLATE = "mpijob.yaml.j2"
MANIFEST = "mpijob.yaml"
#: MPIJob condition types (kubeflow common JobConditionType) → normalised states.
CONDITIONS = {"Created": PENDING, "Suspended": PENDING, "Running": RUNNING, "Restarting": RUNNING,
              "Succeeded": COMPLETED, "Failed": FAILED}


def k8s_name(run_id: str) -> str:
    """The MPIJob's name: `hpcprof-<run id>` as a DNS-1123 label (pods append suffixes)."""
    return ("hpcprof-" + re.sub(r"[^a-z0-9-]", "-", run_id.lower()))[:50].rstrip("-")


def check_site(site: SiteConfig, run_dir: Path,
               experiment_container: ContainerConfig | None = None) -> KubernetesConfig:
    """A Kubernetes site needs its `kubernetes:` block, no `container:` on the site or the
    experiment (the pods are the containers), and the run directory under the PVC's mount path."""
    if site.kubernetes is None:
        raise UserError(f"field 'kubernetes': site {site.name} uses scheduler kubernetes but has no "
                        "kubernetes: block (image, pvc, mount_path)")
    if site.container is not None or experiment_container is not None:
        raise UserError(f"field 'container': site {site.name} runs on Kubernetes, whose pods already "
                        "run kubernetes.image; remove the container: block")
    mount = Path(site.kubernetes.mount_path)
    if not run_dir.resolve().is_relative_to(mount):
        raise UserError(f"field 'kubernetes.mount_path': the run directory {run_dir} is not under "
                        f"{mount}, so the pods cannot see it; run hpcprof with --workdir on that volume")
    return site.kubernetes


def pod_start_dir(site: SiteConfig, submit_dir: Path | None, run_dir: Path) -> Path | None:
    """Where ranks start in the pods: the submit directory if it is on the PVC, else the run
    directory (a path only the submit host has would stop job.sh at its `cd`)."""
    mount = site.kubernetes.mount_path if site.kubernetes else "/"
    if submit_dir is not None and submit_dir.resolve().is_relative_to(mount):
        return submit_dir
    return run_dir


def render_manifest(env: jinja2.Environment, context: dict[str, Any], site: SiteConfig,
                    run_dir: Path) -> str:
    """The MPIJob for one run, parsed back once so that a broken document never gets written."""
    k8s = check_site(site, run_dir, context["experiment_container"])
    launch = [*context["launcher"], f"{run_dir}/rank_wrapper.sh", *context["rank_argv"]]
    text = env.get_template(MANIFEST_TEMPLATE).render({
        **context, "k8s": k8s, "k8s_name": k8s_name(context["run_id"]),
        "walltime_seconds": walltime_seconds(context["walltime"]),
        "rank_command": shlex.join(str(t) for t in launch)})
    yaml.safe_load(text)
    return text


def parse_state(document: dict[str, Any]) -> JobState:
    """An MPIJob's `kubectl get -o json` → state: the latest condition whose status is True."""
    conditions = [c for c in document.get("status", {}).get("conditions", []) if c.get("status") == "True"]
    if not conditions:
        return JobState(PENDING, reason="no conditions yet")
    last = max(conditions, key=lambda c: c.get("lastTransitionTime", ""))
    state = CONDITIONS.get(last.get("type", ""), UNKNOWN)
    exit_code = 0 if state == COMPLETED else (1 if state == FAILED else None)
    return JobState(state, exit_code, " ".join(filter(None, (last.get("reason"), last.get("message")))))


class KubernetesScheduler(Scheduler):
    """kubeflow MPIJob through kubectl; job id `NAMESPACE/NAME`."""

    name = "kubernetes"
    template = "local.sh.j2"  # job.sh runs in the launcher pod exactly as a local job
    runs_containers = True
    by_hand = "kubectl apply -f {run_dir}/mpijob.yaml"

    @staticmethod
    def _kubectl(args: list[str]) -> Any:
        return run_command(["kubectl", *args], "kubernetes")

    def submit(self, script: Path, run_dir: Path, after: Sequence[str] = ()) -> str:
        """`kubectl apply -f RUN_DIR/mpijob.yaml -o json`."""
        no_dependencies(self.name, after)
        proc = self._kubectl(["apply", "-f", str(run_dir / MANIFEST), "-o", "json"])
        if proc.returncode != 0:
            raise UserError(f"kubectl rejected {run_dir / MANIFEST}: {(proc.stderr or proc.stdout).strip()}")
        meta = json.loads(proc.stdout)["metadata"]
        return f"{meta['namespace']}/{meta['name']}"

    def states(self, jobs: Sequence[Job]) -> dict[Job, JobState]:
        """One `kubectl get mpijobs -o json` per namespace for all the jobs."""
        found: dict[str, JobState] = {}
        for namespace in dict.fromkeys(job.id.partition("/")[0] for job in jobs):
            proc = self._kubectl(["get", "mpijobs", "-n", namespace, "-o", "json"])
            if proc.returncode != 0:
                failed = JobState(UNKNOWN, reason=(proc.stderr or proc.stdout).strip())
                found.update({job.id: failed for job in jobs if job.id.startswith(f"{namespace}/")})
                continue
            for item in json.loads(proc.stdout).get("items", []):
                found[f"{namespace}/{item['metadata']['name']}"] = parse_state(item)
        return {job: found.get(job.id, JobState(UNKNOWN, reason=f"mpijob {job.id} not found")) for job in jobs}

    def cancel(self, job_id: str, run_dir: Path) -> bool:
        """`kubectl delete mpijob NAME --ignore-not-found` (its pods go with it)."""
        if self.state(job_id, run_dir).terminal:
            return False
        namespace, _, name = job_id.partition("/")
        proc = self._kubectl(["delete", "mpijob", name, "-n", namespace, "--ignore-not-found", "--wait=false"])
        if proc.returncode != 0:
            raise UserError(f"kubectl delete mpijob {name} failed: {(proc.stderr or proc.stdout).strip()}")
        return True

    def extra_files(self, env: Any, context: dict[str, Any], site: Any, run_dir: Path) -> dict[str, str]:
        """The run's MPIJob manifest."""
        return {MANIFEST: render_manifest(env, context, site, run_dir)}

    def start_dir(self, site: Any, submit_dir: Path | None, run_dir: Path) -> Path | None:
        return pod_start_dir(site, submit_dir, run_dir)
