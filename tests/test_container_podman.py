"""Ranks inside real podman containers (Debian's podman 4.3; tests/services/podman.sh installs
and configures it): an image built here from local files, a 2-rank CPU seqpar through
`hpcprof submit --site-file site_configs/local-podman.yaml`, then `hpcprof collect`.

The image is a skeleton root file system (directories, /bin -> usr/bin links, passwd) imported
with `podman import`; the host's /usr, its Python and the venv are bind-mounted read-only, so
the image holds no copy of Python and builds in about a second without any registry.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml
from hpcprof_cli import hpcprof

import hpcprof as hpcprof_package

REPO = Path(__file__).resolve().parents[1]
SITE = REPO / "site_configs" / "local-podman.yaml"
IMAGE = yaml.safe_load(SITE.read_text())["container"]["image"]

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    shutil.which("podman") is None or os.geteuid() != 0,
    reason="needs root and podman (tests/services/podman.sh installs it; CI runs it)")]


def skeleton_rootfs() -> bytes:
    """A tar of an empty Debian-like root: merged-/usr links, passwd/group, mount points."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add(name: str, kind: bytes = tarfile.DIRTYPE, target: str = "", data: bytes = b"") -> None:
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode, info.size = kind, target, 0o755, len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
        for d in ("proc", "sys", "dev", "tmp", "etc", "run", "root", "usr", "var", "var/tmp", "home"):
            add(d)
        for link in ("bin", "lib", "lib64", "sbin"):
            add(link, tarfile.SYMTYPE, f"usr/{link}")
        add("etc/passwd", tarfile.REGTYPE, data=b"root:x:0:0:root:/root:/bin/bash\n")
        add("etc/group", tarfile.REGTYPE, data=b"root:x:0:\n")
    return buf.getvalue()


@pytest.fixture(scope="module")
def image() -> str:
    """Import the skeleton as the image the podman site names (replacing an older one)."""
    start = time.monotonic()
    subprocess.run(["podman", "import", "-", IMAGE], input=skeleton_rootfs(), check=True,
                   capture_output=True, timeout=120)
    print(f"image {IMAGE} built in {time.monotonic() - start:.1f} s")
    return IMAGE


def host_mounts() -> list[str]:
    """What the ranks need from the host, read-only at the same paths: Python, venv, hpcprof."""
    paths = {Path(sys.base_prefix).resolve(), Path(sys.prefix), Path(hpcprof_package.__file__).resolve().parents[1]}
    paths = {p for p in paths if not p.is_relative_to("/usr")}  # /usr is the site's own mount
    return [f"{p}:{p}:ro" for p in sorted(paths)]


def site_file(tmp_path: Path, **container: object) -> Path:
    """The shipped podman site with this host's Python mounted in."""
    site = yaml.safe_load(SITE.read_text())
    site["container"]["mounts"] += host_mounts()
    site["container"].update(container)
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(site))
    return path


EXPERIMENT = """\
name: seqpar-podman
workload:
  kind: seqpar
  args: {sequence_length: 128, hidden_dim: 64, iterations: 6, warmup_iterations: 1, check: true}
resources: {nodes: 1, ranks_per_node: 2}
profile: {tool: torch, ranks: all}
"""


def test_two_rank_seqpar_in_podman_containers(tmp_path: Path, image: str) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT)
    site = site_file(tmp_path)
    start = time.monotonic()
    sub = hpcprof("submit", str(exp), "--site", "local-podman", "--site-file", str(site), "--wait", cwd=tmp_path)
    assert sub.returncode == 0, sub.stdout + sub.stderr
    print(f"2-rank seqpar in podman: {time.monotonic() - start:.1f} s")
    [run] = [p.parent for p in (tmp_path / "hpcprof-runs").glob("*/*/config.json")]
    job = (run / "job.sh").read_text()
    assert " podman run --rm " in job and f"{image} \"$RUN_DIR/rank_wrapper.sh\"" in job
    for rank in (0, 1):
        log = (run / "logs" / f"rank{rank}.log").read_text()
        assert "runs under torch" in log  # test_ranks_really_run_in_containers checks where
        trace = run / "profiles" / "torch" / f"rank{rank}.pt.trace.json"
        assert trace.is_file(), sorted(str(p.relative_to(run)) for p in run.rglob("*"))
        assert json.loads(trace.read_text())["traceEvents"]
    col = hpcprof("collect", cwd=tmp_path)
    assert col.returncode == 0, col.stdout + col.stderr
    st = hpcprof("status", "--format", "json", cwd=tmp_path)
    [row] = json.loads(st.stdout)
    assert (row["state"], row["exit_code"]) == ("COMPLETED", 0)


@pytest.mark.parametrize("profiler", ["inside", "outside"])
def test_ranks_really_run_in_containers(tmp_path: Path, image: str, profiler: str) -> None:
    """Each rank's program sees podman's /run/.containerenv and writes into the bind-mounted
    run directory under the same name it would use outside; with `profiler: outside` the rank
    wrapper runs on the host and starts the container itself."""
    exp = tmp_path / "exp.yaml"
    exp.write_text("name: where\nworkload:\n  kind: command\n  argv: [bash, -c, 'test -f /run/.containerenv "
                   "&& echo inside > \"$HPCPROF_RUN_DIR/results/where$HPCPROF_RANK.txt\"']\n"
                   "resources: {nodes: 1, ranks_per_node: 2}\n")
    sub = hpcprof("submit", str(exp), "--site", "local-podman", "--site-file",
                      str(site_file(tmp_path, profiler=profiler)), "--wait", cwd=tmp_path)
    assert sub.returncode == 0, sub.stdout + sub.stderr
    [run] = [p.parent for p in (tmp_path / "hpcprof-runs").glob("*/*/config.json")]
    [line] = [x for x in (run / "job.sh").read_text().splitlines() if "rank_wrapper.sh" in x
              and "--hpcprof-reference" not in x]   # the workload's, not its unprofiled reference
    assert (line.index("podman run") < line.index("rank_wrapper.sh")) == (profiler == "inside")
    assert [(run / "results" / f"where{r}.txt").read_text() for r in (0, 1)] == ["inside\n", "inside\n"]


@pytest.mark.parametrize("change, field", [
    ({"image": "localhost/hpcprof-does-not-exist:1"}, "container.image"),
    ({"command": "/nonexistent/podman"}, "container.command"),
])
def test_submit_refuses_missing_image_or_runtime(tmp_path: Path, image: str, change: dict, field: str) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT)
    proc = hpcprof("submit", str(exp), "--site", "local-podman", "--site-file",
                       str(site_file(tmp_path, **change)), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    message = proc.stderr.strip()
    assert len(message.splitlines()) == 1 and field in message and "Traceback" not in message
    assert not (tmp_path / "hpcprof-runs").exists()
