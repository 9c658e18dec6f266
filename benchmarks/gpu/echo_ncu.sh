#!/bin/bash
# Gold for the ncu side of issue 18: Echo's own kernel_metric/run.sh (unmodified: ncu with Echo's
# sections on its GPT-2 input folder at world size 1, then its ncu_report_process.py) on the GPU
# machine, offline. Echo's files are not in the repository; before the run, on the CPU machine:
#   mkdir -p .gpu/echo-slowdown && git --git-dir=/work/.mirror/NetX-lab+Echo-slowdown/repo archive \
#     7d698a77c0318f2b706ed27d3f6221f8b1e0a349 kernel_metric utils | tar -x -C .gpu/echo-slowdown
# and carry `.gpu/echo-slowdown` (git-ignored by /.gpu/). Needs ncu on PATH (or $NCU) and a python
# ($PYTHON, default python3) with torch, torchvision and transformers (Echo's train_script imports them).
# Writes to $OUT/echo_ncu/ (default ./echo_ncu_out): output.ncu-rep, output_details.csv,
# output_raw.csv, output_kshortname.csv (Echo's temp/), kernel_metric_output.csv (Echo's output/),
# global_config.json as filled in, run.log. Expected: one row per profiled kernel of one GPT-2
# backward pass (ID, Kernel Name, Compute throughput, SM, Memory throughput, DRAM throughput,
# Achieved occupancy, Maximum occupancy, L1 hit rate, L2 hit rate), SM = 132 on an H200.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
echo_dir=${ECHO_DIR:-$repo/.gpu/echo-slowdown}
out=${OUT:-$PWD/echo_ncu_out}/echo_ncu
python=$(command -v "${PYTHON:-python3}")
ncu=$(command -v "${NCU:-ncu}")
[ -f "$echo_dir/kernel_metric/run.sh" ] || { echo "echo_ncu: no $echo_dir/kernel_metric/run.sh: copy Echo there (see the header)" >&2; exit 2; }
work=$(mktemp -d)
cp -r "$echo_dir/kernel_metric" "$work/kernel_metric"
# global_config.json filled in as Echo's update_configs.py does: this machine's ncu and python, GPU 0
cat > "$work/kernel_metric/input/global_config.json" <<JSON
{"cuda_visible_devices": "0", "cuda_version_check": "$("$python" -c 'import torch; print(torch.version.cuda)')",
 "ncu_path": "$ncu", "python_path": "$python", "nsys_path": "$(command -v nsys || echo nsys)"}
JSON
mkdir -p "$work/bin"
if ! command -v jq >/dev/null; then  # run.sh reads the config with `jq -r '.key' FILE`; offline, no jq: a shim
  printf '#!/bin/sh\nexec "%s" -c "import json,sys; print(json.load(open(sys.argv[2]))[sys.argv[1].lstrip(\\".\\")])" "$2" "$3"\n' \
    "$python" > "$work/bin/jq"
  chmod +x "$work/bin/jq"
fi
mkdir -p "$out"
(cd "$work/kernel_metric" && PATH="$work/bin:$PATH" PYTHONPATH="$echo_dir${PYTHONPATH:+:$PYTHONPATH}" \
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 bash run.sh) 2>&1 | tee "$out/run.log"
cp "$work"/kernel_metric/temp/output.ncu-rep "$work"/kernel_metric/temp/output_*.csv \
   "$work/kernel_metric/output/kernel_metric_output.csv" "$work/kernel_metric/input/global_config.json" "$out"/
rm -rf "$work"
echo "echo_ncu: wrote $out: $(($(wc -l < "$out/kernel_metric_output.csv") - 1)) kernel rows"
