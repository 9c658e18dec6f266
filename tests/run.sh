#!/usr/bin/env bash
# The test command (the README's second command; .ci/run runs exactly this).
# Installs hpcprof (non-editable, so the packaged templates and site configs are what is tested)
# with its test extras into .venv, starts the local one-node Slurm with Torque wrappers when run
# as root, then runs pytest. Arguments are passed to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED="${HPCPROF_SHARED:-$(cd .. && pwd)/shared}"

python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q ".[test]"

if [ "$(id -u)" = 0 ] && [ -x "$SHARED/tools/slurm-local.sh" -o -f "$SHARED/tools/slurm-local.sh" ]; then
  export TORQUE=1 CPUS=4
  bash "$SHARED/tools/slurm-local.sh" install
  bash "$SHARED/tools/slurm-local.sh" start
fi

[ "$(id -u)" = 0 ] && bash tests/services/chromium.sh   # headless Chromium for the HTML report check

exec .venv/bin/pytest -q -p no:cacheprovider "$@"
