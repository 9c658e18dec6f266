#!/usr/bin/env bash
# The test command (the README's second command; .ci/run runs exactly this).
# Installs hpcprof (non-editable, so the packaged templates and site configs are what is tested)
# with its test extras into .venv; as root, starts the local one-node Slurm with Torque wrappers
# (from ../shared/tools, when there) and installs the test services; then runs pytest. Arguments
# are passed to pytest. ruff and mypy (pyproject.toml) run before pytest: CI fails on a lint or type error.
# `--fast` (first): the developer's tier, the tests not marked `slow` (setup.cfg: no service started or
# installed, none measured long), with no service started or installed; without it, the full suite CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED="${HPCPROF_SHARED:-$(cd .. && pwd)/shared}"
FAST=0
if [ "${1:-}" = --fast ]; then
  FAST=1
  shift
fi
# Root starts and installs the test services, for the full suite alone (the fast tier uses none).
SERVICES=0
if [ "$(id -u)" = 0 ] && [ "$FAST" = 0 ]; then SERVICES=1; fi

python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q ".[test]"

if [ "$SERVICES" = 1 ] && [ -f "$SHARED/tools/slurm-local.sh" ]; then
  export TORQUE=1 CPUS=4
  bash tests/services/munge.sh   # munged as the munge user, a dead one's root-owned lock cleared
  bash "$SHARED/tools/slurm-local.sh" install
  scontrol ping >/dev/null 2>&1 && slurm_was_up=1 || slurm_was_up=0
  # six CPUs (more than the machine's, allowed): the time-limit jobs (tests/slurm_cluster.py) run side by side
  CPUS=6 bash "$SHARED/tools/slurm-local.sh" start
  # A controller started now recovers the queue an earlier, killed run left, with the cancels it made
  # after the last state save undone: those jobs would hold the node's CPUs, so they are cancelled.
  [ "$slurm_was_up" = 0 ] && bash tests/services/cancel-recovered.sh
fi
# A real OpenPBS server with Polaris's resources; its commands stay in /opt/pbs/bin (LINK_BIN=0)
# so they do not shadow the Torque wrappers above.
if [ "$SERVICES" = 1 ] && [ -f "$SHARED/tools/openpbs/pbs-local.sh" ]; then
  LINK_BIN=0 bash "$SHARED/tools/openpbs/pbs-local.sh" install
  LINK_BIN=0 bash "$SHARED/tools/openpbs/pbs-local.sh" start
fi

# The test services the project installs itself (tests/services/*.sh, idempotent, as root): nsys
# 2022.4 for the differential tests, podman and kubectl for the container and Kubernetes tests, a
# two-node Slurm for the multi-node tests.
# Without root the tests that need them skip with the reason (never under CI=true).
if [ "$SERVICES" = 1 ]; then
  apt-get update -qq >/dev/null
  for service in nsys podman kubectl; do bash "tests/services/$service.sh" >/dev/null; done
  bash tests/services/slurm-cluster.sh start   # two Slurm nodes in network namespaces (needs slurm-wlm, munge)
  bash tests/services/chromium.sh   # headless Chromium for the HTML report check
fi

# Lint and types first (configured in pyproject.toml): CI fails on either.
.venv/bin/ruff check hpcprof tests benchmarks
.venv/bin/mypy

# The 25 slowest tests are printed and kept in $HPCPROF_DURATIONS (the lead commits them to benchmarks/results/).
# Three workers by default (HPCPROF_WORKERS): on 2 cores part of the suite waits on schedulers and subprocesses;
# tests/conftest.py's groups keep a shared server's tests in one worker and start the longest groups first
# (--no-loadscope-reorder keeps that order).
DURATIONS="${HPCPROF_DURATIONS:-test-durations.txt}"
# Byte code cached as an installed package has it: under PYTHONDONTWRITEBYTECODE every worker, spawned
# process and script compiles (and pytest rewrites) every test module again at every start.
unset PYTHONDONTWRITEBYTECODE
# The tests marked `quiet` compare the step times of runs, which the other tests' load would move by
# tens of %: they run after the rest, one at a time (the fast tier has none: they are slow too).
MARKS="not quiet"
if [ "$FAST" = 1 ]; then MARKS="not slow and not quiet"; fi
set +e
.venv/bin/pytest -q -p no:cacheprovider -n "${HPCPROF_WORKERS:-3}" --dist loadgroup --no-loadscope-reorder --durations=25 -m "$MARKS" "$@" | tee "$DURATIONS"
status=${PIPESTATUS[0]}
if [ "$FAST" = 0 ]; then
  .venv/bin/pytest -q -p no:cacheprovider --durations=25 -m quiet "$@" | tee -a "$DURATIONS"
  quiet=${PIPESTATUS[0]}
  # 5: no test selected (arguments that name none of them)
  if [ "$status" = 0 ] && [ "$quiet" != 5 ]; then status=$quiet; fi
fi
exit "$status"
