"""`scheduler: kubernetes`: rendered kubeflow MPIJobs validated against the MPIJob CRD's OpenAPI
schema (tests/data/kubernetes/kubeflow.org_mpijobs.yaml, copied from kubeflow/mpi-operator
manifests/base/kubeflow.org_mpijobs.yaml at commit caa3c47fc42eb762635f78045ec0fcd1a89eb038),
bad input, and the real kubectl client against an unreachable API server (no Kubernetes API
server can be installed here, so nothing is ever applied).
"""

from __future__ import annotations

import copy
import functools
import shlex
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from hpcprof_cli import hpcprof

from hpcprof.config.experiment import expand
from hpcprof.config.site import SiteConfig
from hpcprof.core.models import validate
from hpcprof.render.job import render_point, template_dirs
from hpcprof.schedulers.base import COMPLETED, FAILED, PENDING, RUNNING
from hpcprof.schedulers.kubernetes import MANIFEST, k8s_name, parse_state

if TYPE_CHECKING:
    import jsonschema

CRD = Path(__file__).parent / "data" / "kubernetes" / "kubeflow.org_mpijobs.yaml"
RUN_ID = "20250101-120000-abc123"


def eks_site(mount: str = "/fsx", **kubernetes: Any) -> dict[str, Any]:
    """The EKS seed's cluster: 8-GPU workers, Open MPI launcher, run directory on an FSx PVC."""
    return {"name": "eks", "scheduler": "kubernetes",
            "launcher": {"kind": "mpiexec", "flavor": "openmpi", "command": "mpirun"},
            "node": {"gpus": 8, "cores": 96, "ranks_per_node": 8}, "paths": {"python": "python"},
            "kubernetes": {"image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/gpu-profile:latest",
                           "pvc": "fsx-claim", "mount_path": mount, **kubernetes}}


def experiment(argv: list[str] | None = None) -> dict[str, Any]:
    return {"name": "ddp-profile",
            "workload": {"kind": "command", "argv": argv or ["python", "train.py", "--epochs", "1"]},
            "resources": {"nodes": 2, "walltime": "00:20:00"},
            "profile": {"tool": "nsys", "ranks": "all"}}


def render(site_data: dict[str, Any], exp: dict[str, Any], run_dir: str = "/fsx/runs/ddp-profile/" + RUN_ID) -> dict[str, str]:
    site = validate(SiteConfig, site_data, "site test")
    (point,) = expand(exp, site, "experiment test")
    return render_point(point, site, Path(run_dir), RUN_ID, template_dirs(site, None)).files


def closed(schema: Any) -> Any:
    """The CRD schema with unknown fields refused (the API server would silently prune them,
    which hides a misspelt key), except where it says x-kubernetes-preserve-unknown-fields."""
    if isinstance(schema, dict):
        out = {k: closed(v) for k, v in schema.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [closed(v) for v in schema]
    return schema


@functools.lru_cache(maxsize=1)
def mpijob_validator() -> jsonschema.Draft7Validator:
    import jsonschema  # here, not at collection: its format checkers build a grammar at import

    crd = yaml.load(CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # 670 kB: libyaml's parser
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v2beta1"]
    schema = closed(version["schema"]["openAPIV3Schema"])
    return jsonschema.Draft7Validator(schema)


@pytest.mark.slow
def test_rendered_mpijob_matches_the_crd_schema() -> None:
    files = render(eks_site(), experiment())
    doc = yaml.safe_load(files[MANIFEST])
    errors = sorted(mpijob_validator().iter_errors(doc), key=str)
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)
    assert (doc["apiVersion"], doc["kind"]) == ("kubeflow.org/v2beta1", "MPIJob")
    spec = doc["spec"]
    assert spec["slotsPerWorker"] == 8 and spec["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    assert spec["runPolicy"]["activeDeadlineSeconds"] == 1200
    worker = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert worker["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 8}
    assert worker["volumes"][0]["persistentVolumeClaim"]["claimName"] == "fsx-claim"
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    run_dir = "/fsx/runs/ddp-profile/" + RUN_ID
    assert launcher["command"] == ["bash", f"{run_dir}/job.sh"]
    assert launcher["volumeMounts"] == [{"name": "hpcprof-runs", "mountPath": "/fsx"}]
    # the ranks mpirun starts on the workers run hpcprof's wrapper, which runs nsys
    rank_command = shlex.split(doc["metadata"]["annotations"]["hpcprof/rank-command"])
    assert rank_command[:5] == ["mpirun", "-n", "16", "--map-by", "ppr:8:node"]
    assert rank_command[rank_command.index(f"{run_dir}/rank_wrapper.sh") + 1:] == [
        "python", "train.py", "--epochs", "1"]
    assert "exec nsys profile" in files["rank_wrapper.sh"]
    assert '"$RUN_DIR/rank_wrapper.sh"' in files["job.sh"] and "mpirun -n 16" in files["job.sh"]


def test_schema_check_catches_bad_documents() -> None:
    """The validator is not vacuous: a wrong type and a misspelt key are both reported."""
    doc = yaml.safe_load(render(eks_site(), experiment())[MANIFEST])
    wrong_type, misspelt = copy.deepcopy(doc), copy.deepcopy(doc)
    wrong_type["spec"]["slotsPerWorker"] = "8"
    misspelt["spec"]["mpiReplicaSpecs"]["Worker"]["replica"] = 2
    assert any("'8' is not of type 'integer'" in e.message for e in mpijob_validator().iter_errors(wrong_type))
    assert any("'replica' was unexpected" in e.message for e in mpijob_validator().iter_errors(misspelt))


def test_cpu_site_asks_for_no_gpus_and_hostile_argv_stays_data() -> None:
    """Workload arguments that would break YAML or the shell reach the manifest as data."""
    site = eks_site()
    site["node"] = {"gpus": 0, "cores": 8, "ranks_per_node": 2}
    argv = ["bash", "-c", 'echo "a: b" # \n- {x: [1]} \'$(id)\'']
    doc = yaml.safe_load(render(site, experiment(argv))[MANIFEST])
    assert mpijob_validator().is_valid(doc)
    assert "resources" not in doc["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert shlex.split(doc["metadata"]["annotations"]["hpcprof/rank-command"])[-3:] == argv


def test_ranks_start_on_the_volume() -> None:
    """A submit directory the pods cannot see is replaced by the run directory; one on the PVC stays."""
    site = validate(SiteConfig, eks_site(), "site test")
    (point,) = expand(experiment(), site, "experiment test")
    run_dir = Path("/fsx/runs/ddp-profile/" + RUN_ID)
    for submit_dir, start in ((Path("/home/user"), run_dir), (Path("/fsx/project"), Path("/fsx/project"))):
        job = render_point(point, site, run_dir, RUN_ID, template_dirs(site, None), submit_dir).files["job.sh"]
        assert f"\ncd {start} || exit 1\n" in job


def test_job_name_is_a_dns_label() -> None:
    assert k8s_name("20250101-120000-ABC_123") == "hpcprof-20250101-120000-abc-123"


@pytest.mark.parametrize("conditions, state", [
    ([], PENDING),
    ([("Created", "True", "2025-01-01T00:00:00Z")], PENDING),
    ([("Created", "True", "2025-01-01T00:00:00Z"), ("Running", "True", "2025-01-01T00:00:05Z")], RUNNING),
    ([("Created", "True", "2025-01-01T00:00:00Z"), ("Running", "False", "2025-01-01T00:01:00Z"),
      ("Succeeded", "True", "2025-01-01T00:01:00Z")], COMPLETED),
    ([("Running", "False", "2025-01-01T00:01:00Z"), ("Failed", "True", "2025-01-01T00:01:00Z")], FAILED),
])
def test_state_from_conditions(conditions: list[tuple[str, str, str]], state: str) -> None:
    """kubeflow's condition types (Created, Running, Restarting, Succeeded, Failed, Suspended)."""
    doc = {"status": {"conditions": [{"type": t, "status": s, "lastTransitionTime": when, "reason": f"MPIJob{t}"}
                                     for t, s, when in conditions]}}
    assert parse_state(doc).state == state


@pytest.mark.parametrize("change, field", [
    ({"namespace": "Team_A"}, "kubernetes.namespace"),
    ({"pvc": "fsx claim"}, "kubernetes.pvc"),
    ({"image": 'repo/img:1"\n  evil: x'}, "kubernetes.image"),
    ({"mount_path": "/elsewhere"}, "kubernetes.mount_path"),
    ({"gpu_resource": "nvidia.com/gpu: 8\n"}, "kubernetes.gpu_resource"),
    ({"container": {"runtime": "podman", "image": "ubuntu:24.04"}}, "container"),
])
def test_bad_kubernetes_input(tmp_path: Path, change: dict[str, Any], field: str) -> None:
    """One line naming the field, exit 2, nothing written."""
    exp, change = experiment(), dict(change)
    if "container" in change:  # an experiment container block on a Kubernetes site
        exp["container"] = change.pop("container")
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(eks_site(mount=str(tmp_path), **change)))
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(exp))
    proc = hpcprof("submit", "exp.yaml", "--site", "eks", "--site-file", "site.yaml", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    message = proc.stderr.strip()
    assert len(message.splitlines()) == 1 and field in message and "Traceback" not in message, message
    assert not (tmp_path / "hpcprof-runs").exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("kubectl") is None,
                    reason="needs a kubectl client (Debian: apt-get install kubernetes-client)")
def test_real_kubectl_without_api_server(tmp_path: Path) -> None:
    """The real kubectl accepts hpcprof's `apply -f mpijob.yaml -o json` and fails only on the
    connection; hpcprof reports that in one line (exit 2) and leaves the rendered run for a retry."""
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "none",
        "clusters": [{"name": "none", "cluster": {"server": "https://127.0.0.1:9"}}],
        "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}],
        "users": [{"name": "none", "user": {"token": "x"}}]}))
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(eks_site(mount=str(tmp_path))))
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(experiment()))
    proc = hpcprof("submit", "exp.yaml", "--site", "eks", "--site-file", "site.yaml", cwd=tmp_path,
                   env={"KUBECONFIG": str(tmp_path / "kubeconfig")})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "kubectl rejected" in last and "mpijob.yaml" in last and "127.0.0.1:9" in last, last
    [manifest] = list((tmp_path / "hpcprof-runs").glob(f"*/*/{MANIFEST}"))
    assert mpijob_validator().is_valid(yaml.safe_load(manifest.read_text()))
