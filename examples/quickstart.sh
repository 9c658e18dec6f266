#!/usr/bin/env bash
# Set up hpcprof in .venv and answer a first question on this machine: how does the iteration time
# of the sequence-parallel benchmark (2 MPI ranks on the CPU, local site) change with the hidden
# dimension? A small sweep (hidden_dim 256 and 512) -> submit -> run -> collect -> compare -> HTML report.
#
# torch: the CPU build. Where only PyPI is reachable (as on hpcprof's CI) `pip install torch==2.13.0`
# is used as it is; elsewhere set TORCH_INDEX=https://download.pytorch.org/whl/cpu to get PyTorch's
# CPU-only wheel index instead of the default CUDA build and its NVIDIA packages (~3 GB).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0 ${TORCH_INDEX:+--index-url "$TORCH_INDEX"}
.venv/bin/python -m pip install -q ".[local]"              # hpcprof + mpich + mpi4py
source .venv/bin/activate                                   # hpcprof on PATH from here on
export HPCPROF_WORKDIR="${HPCPROF_WORKDIR:-$PWD/hpcprof-runs}"
hpcprof submit examples/seqpar_cpu.yaml --site local --wait \
        --set 'sweep={workload.args.hidden_dim: [256, 512]}'
hpcprof collect
hpcprof compare                                             # the latest sweep: one column per point
hpcprof report --html hpcprof-report.html
cat <<EOF

The answer is in the compare table above (iteration time per hidden_dim) and, with the plots, in
  $PWD/hpcprof-report.html
Runs: $HPCPROF_WORKDIR (hpcprof status). To go on, in this shell or after \`source .venv/bin/activate\`:
  hpcprof submit examples/seqpar_cpu.yaml --site local --wait --set profile.tool=torch && hpcprof collect && hpcprof report
      # torch.profiler traces of the CPU ranks in RUN_DIR/profiles/torch (RUN_DIR: hpcprof status); open one in
      # https://ui.perfetto.dev. On a GPU run: hpcprof trace temporal RUN_DIR/profiles/torch (HTA's analyses need GPU kernels)
  hpcprof doctor --site polaris                                                           # before a cluster
  docs/README.md: your own script, Polaris, Perlmutter, HTA notebooks, Echo, the reference
EOF
