#!/bin/bash
# On the GPU machine: a run rendered from the SHIPPED polaris site with only what this
# machine cannot have swapped out (PBS -> local, PALS mpiexec -> Open MPI mpiexec with Polaris's
# 8 cores per rank, the `module`/`conda` setup lines dropped; the aws-ofi-nccl/hwloc
# LD_LIBRARY_PATH lines, the NCCL/FI_* env, node shape and gpu_affinity: reverse are Polaris's)
# passes the job-start checks and completes. Three runs of seqpar (bf16, nsys on local rank 0):
#   A. the site as derived: NCCL_NET='AWS Libfabric' and no plugin here -> the job stops before any
#      rank, one line naming the plugin directory (what a Polaris job without the plugin now gets
#      instead of NCCL's "Failed to initialize any NET plugin" after the queue);
#   B. paths.python = a venv without hpcprof -> one line naming `hpcprof sites init`;
#   C. NCCL_NET dropped (ALCF's documented fallback) -> checks pass (hpcprof, nsys version printed),
#      the run COMPLETES, collect + report.
# Needs (carried, git-ignored, as e2e_hpcprof.sh): .gpu/whl (and .gpu/whl2 if there), .gpu/libs; Open MPI mpiexec
# and nsys on the machine. Best on nvidia-h200-x4 (Polaris has 4 GPUs per node); with fewer GPUs the
# node shape follows the machine. Run from the repository root:
#   bash benchmarks/gpu/polaris_local_check.sh "$OUT"
# Expected: "A: FAILED (NCCL_NET=AWS Libfabric needs an NCCL network plugin ...)", "B: FAILED (...
# cannot import hpcprof ...)", "C: COMPLETED", and in $OUT/C.job.out the lines "hpcprof: hpcprof
# 0.1.0 (...)" and "hpcprof: nsys <version> (<path>)"; exit 0 only when all three are as expected.
set -u
OUT_DIR=$(mkdir -p "${1:?output directory}" && cd "$1" && pwd)
REPO=$(pwd)
mkdir -p "$OUT_DIR" /tmp/site /tmp/bin
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $(ls .gpu/whl*/*.whl)
export PYTHONPATH=/tmp/site:$REPO PYTHONUNBUFFERED=1
[ -d "$REPO/.gpu/libs" ] && export LD_LIBRARY_PATH=$REPO/.gpu/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
command -v nsys >/dev/null || ln -sf "$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | tail -1)" /tmp/bin/nsys
export PATH=/tmp/bin:$PATH
export HPCPROF_WORKDIR=/tmp/hpcprof-polaris-local XDG_STATE_HOME=/tmp/hpcprof-state
NGPU=${NGPU:-$(python3 -c 'import torch; print(torch.cuda.device_count())')}
[ "$NGPU" -ge 1 ] || { echo "polaris_local_check: no GPU here (torch sees none)"; exit 2; }
python3 -m venv --without-pip /tmp/venv-without-hpcprof

derive() {  # derive NAME [drop-nccl-net] [python]: the shipped polaris site with only the local swaps
  python3 - "$@" <<'EOF'
import sys, yaml
from pathlib import Path
name, drop_net, python, ngpu = sys.argv[1], sys.argv[2] == "1", sys.argv[3], int(sys.argv[4])
site = yaml.safe_load(Path("site_configs/polaris.yaml").read_text())
site.update(name=name, scheduler="local", description="shipped polaris, PBS -> local, PALS -> Open MPI",
            launcher={"kind": "mpiexec", "flavor": "openmpi", "command": "mpiexec",
                      "extra_args": ["--allow-run-as-root", "--oversubscribe"]},
            binding={"depth": 8, "cpu_bind": "core"})        # Open MPI has no "depth": PE=8 cores per rank
site["setup"] = [line for line in site["setup"] if not line.startswith(("module ", "conda "))]
for key in ("pbs_select", "queues", "workdir", "require_account"):
    site.pop(key, None)
site["defaults"] = {k: v for k, v in site["defaults"].items() if k not in ("queue", "filesystems")}
site["env"].update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
if drop_net:
    del site["env"]["NCCL_NET"]
if ngpu < site["node"]["gpus"]:
    site["node"].update(gpus=ngpu, ranks_per_node=ngpu)
site["paths"]["python"] = python
if python != "python3":   # run B: the job's PYTHONPATH has the dependencies but not hpcprof
    site["env"]["PYTHONPATH"] = "/tmp/site"
print(yaml.safe_dump(site, sort_keys=False))
EOF
}
derive polaris-A 0 python3 "$NGPU" > "$OUT_DIR/site-A.yaml"
derive polaris-B 1 /tmp/venv-without-hpcprof/bin/python "$NGPU" > "$OUT_DIR/site-B.yaml"
derive polaris-C 1 python3 "$NGPU" > "$OUT_DIR/site-C.yaml"
diff <(python3 -c 'import yaml,sys; print(yaml.safe_dump(yaml.safe_load(open("site_configs/polaris.yaml")), sort_keys=True))') \
     <(python3 -c 'import yaml,sys; print(yaml.safe_dump(yaml.safe_load(open(sys.argv[1])), sort_keys=True))' "$OUT_DIR/site-C.yaml") \
     > "$OUT_DIR/site-C.diff"

COMMON=(--wait --set resources.nodes=1 --set 'sweep={}' --set workload.args.precision=bfloat16
        --set workload.args.iterations=20 --set profile.ranks=local:0
        --set profile.nsys.sample=none --set profile.nsys.cpuctxsw=none --set profile.nsys.stats=false)
ok=0
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
  nsys --version
  mkdir -p /tmp/polaris-submit
  for run in A B C; do   # submitted outside the repository: the ranks start there (no hpcprof in the cwd)
    echo "=== run $run"
    (cd /tmp/polaris-submit && python3 -m hpcprof submit "$REPO/examples/seqpar_polaris.yaml" \
       --site-file "$OUT_DIR/site-$run.yaml" "${COMMON[@]}")
    echo "submit exit $?"
  done
  python3 -m hpcprof status --format json > "$OUT_DIR/status.json"
  python3 -m hpcprof collect
  python3 -m hpcprof report
} > "$OUT_DIR/check.log" 2>&1
python3 - "$OUT_DIR" <<'EOF' || ok=1
import json, shutil, sys
from pathlib import Path
out = Path(sys.argv[1])
runs = json.loads((out / "status.json").read_text())
assert len(runs) == 3, runs
expected = {"A": ("FAILED", "NCCL_NET=AWS Libfabric needs an NCCL network plugin"),
            "B": ("FAILED", "cannot import hpcprof"), "C": ("COMPLETED", "")}
good = True
for run in runs:
    label = json.loads((Path(run["path"]) / "config.json").read_text())["site"]["name"][-1]
    state, needle = expected[label]
    print(f"{label}: {run['state']} ({run['reason']})")
    shutil.copy(Path(run["path"]) / "logs" / "job.out", out / f"{label}.job.out")
    shutil.copy(Path(run["path"]) / "job.sh", out / f"{label}.job.sh")
    good &= run["state"] == state and needle in run["reason"]
text = (out / "C.job.out").read_text()
good &= "hpcprof: hpcprof " in text and "hpcprof: nsys " in text
sys.exit(0 if good else 1)
EOF
tail -n 30 "$OUT_DIR/check.log"
echo "polaris_local_check: $([ $ok = 0 ] && echo as expected || echo NOT as expected)"
exit $ok
