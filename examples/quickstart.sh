#!/usr/bin/env bash
# Set up hpcprof in .venv and run the main job end to end on this machine:
# local site, CPU, 2 MPI ranks of the sequence-parallel benchmark -> submit -> run -> collect -> report.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0          # the CPU build
.venv/bin/python -m pip install -q ".[local]"              # hpcprof + mpich + mpi4py
export HPCPROF_WORKDIR="${HPCPROF_WORKDIR:-$PWD/hpcprof-runs}"
.venv/bin/hpcprof submit examples/seqpar_cpu.yaml --site local --wait
.venv/bin/hpcprof collect
.venv/bin/hpcprof report
