#!/bin/bash
# Debian's podman for the container tests: install it and configure it the way it
# runs as root on these machines (no systemd, cgroup v2 layout crun rejects): runc as the
# runtime, cgroupfs as the cgroup manager, no default ulimits (setrlimit is refused).
# Idempotent; run as root. Images are built by the tests themselves from local files.
set -euo pipefail
if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends podman runc >/dev/null
fi
mkdir -p /etc/containers
conf=/etc/containers/containers.conf
marker="# hpcprof tests/services/podman.sh"
if ! grep -qF "$marker" "$conf" 2>/dev/null; then
  cat > "$conf" <<CONF
$marker
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
fi
podman --version
