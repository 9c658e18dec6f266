#!/bin/bash
# The shipped local site's `launcher.flavor: auto` on the GPU machine, whose mpiexec is Open MPI's (the development
# machine's is the mpich wheel's Hydra, tests/test_local_runs.py): the flavour it takes, the launcher line it renders,
# and the quickstart's runs (a command and the seqpar benchmark with mpi4py, 2 CPU ranks) submitted, collected and
# reported. One device call, carrying .gpu/whl and .gpu/whl2 (goals45.sh pack):
#   bash benchmarks/gpu/local_auto_flavour.sh      (results: benchmarks/gpu/results/local_auto_flavour.txt)
set -u
REPO=$PWD
bash benchmarks/gpu/goals45.sh setup .gpu/whl .gpu/whl2 > /dev/null 2>&1 || { echo "setup failed"; exit 1; }
export PYTHONPATH=/tmp/site:$REPO OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1   # Open MPI refuses root
W=$(mktemp -d) && cd "$W" || exit 1
echo "== mpiexec on PATH: $(command -v mpiexec): $(mpiexec --version 2>&1 | head -1)"
python3 -m hpcprof sites 2>&1 | grep -E "^│ local "
echo "== the launcher line of the seqpar job (submit --dry-run)"
python3 -m hpcprof submit "$REPO/examples/seqpar_cpu.yaml" --site local --dry-run 2>&1 | grep -E "mpiexec" | head -1
for e in command_hello seqpar_cpu; do
  echo "== submit examples/$e.yaml --site local --wait"
  timeout 200 python3 -m hpcprof submit "$REPO/examples/$e.yaml" --site local --wait 2>&1 | grep -E "COMPLETED|FAILED|Error"
done
timeout 200 python3 -m hpcprof collect 2>&1 | tail -2
timeout 100 python3 -m hpcprof report 2>&1 | grep -E "workload|state|iteration.median|phase"
