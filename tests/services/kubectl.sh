#!/bin/bash
# A kubectl client for tests/test_kubernetes.py (no API server: the test only checks that the
# real client takes hpcprof's arguments and fails on the connection). Debian's package is
# kubernetes-client; a kubectl already on PATH is kept. Idempotent; run as root.
set -euo pipefail
if ! command -v kubectl >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends kubernetes-client >/dev/null
fi
kubectl version --client 2>/dev/null | head -n 1 || true
