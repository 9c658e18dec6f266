#!/bin/bash
# Gold for hpcprof's ncu analyses: Echo's kernel_metric module (its ncu commands, its exports, its own
# ncu_report_process.py, unmodified) on Echo's GPT-2 input folder at world size 1 on the GPU machine,
# offline, then `hpcprof ncu metrics --layout echo` on the same exports, compared byte for byte.
#
# Narrowed so it ends in < 5 min on one H200 (Echo's run.sh as is ran > 500 s: --replay-mode application
# reruns the whole program, 3 epochs x 100 batches, once per metric pass). Same ncu flags and sections as
# run.sh, except: REPLAY=kernel (default; Echo: application), LAUNCH_COUNT=100 kernels of the profiled
# backward pass (ncu --launch-count; 0 = all), and in the copy of Echo's input EPOCHS=1 (local_config.json)
# and ITERS=4 batches per epoch (define_model.py's `* 100`): the profiled iteration is then the 3rd.
# REPLAY=application LAUNCH_COUNT=0 EPOCHS=3 ITERS=100 is Echo's run.sh exactly. LIMIT (240 s) bounds ncu.
#
# Before the run, on the CPU machine (Echo is not in the repository):
#   mkdir -p .gpu/echo-slowdown && git --git-dir=/work/.mirror/NetX-lab+Echo-slowdown/repo archive \
#     7d698a77c0318f2b706ed27d3f6221f8b1e0a349 kernel_metric utils | tar -x -C .gpu/echo-slowdown
# and carry `.gpu/echo-slowdown` and `.gpu/whl` (hpcprof's wheels the GPU image lacks; git-ignored by /.gpu/).
# Needs ncu on PATH (or $NCU, else /opt/nvidia/nsight-compute/*/ncu) and a python ($PYTHON, default python3)
# with torch, transformers and pandas. Usage (repository root): bash benchmarks/gpu/echo_ncu.sh
# Writes $OUT/echo_ncu/ (default ./echo_ncu_out/echo_ncu): output.ncu-rep, output_details.csv,
# output_raw.csv, output_kshortname.csv (Echo's temp/), kernel_metric_output.csv (Echo's output/),
# hpcprof_echo.csv (from the two CSVs), hpcprof_echo_rep.csv (from the .ncu-rep), hpcprof_default.csv,
# compare.txt ("identical"/"DIFFERENT" per hpcprof output, row count), commands.txt, versions.txt,
# global_config.json, local_config.json, run.log. Expected: LAUNCH_COUNT rows (ID, Kernel Name, Compute
# throughput, SM = 132, Memory throughput, DRAM throughput, Achieved occupancy, Maximum occupancy,
# L1 hit rate, L2 hit rate), both hpcprof outputs identical.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
echo_dir=${ECHO_DIR:-$repo/.gpu/echo-slowdown}
out=${OUT:-$PWD/echo_ncu_out}/echo_ncu
python=$(command -v "${PYTHON:-python3}")
ncu=${NCU:-$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)}
REPLAY=${REPLAY:-kernel} LAUNCH_COUNT=${LAUNCH_COUNT:-100} EPOCHS=${EPOCHS:-1} ITERS=${ITERS:-4} LIMIT=${LIMIT:-240}
[ -f "$echo_dir/kernel_metric/run.sh" ] || { echo "echo_ncu: no $echo_dir/kernel_metric/run.sh: copy Echo there (see the header)" >&2; exit 2; }
[ -x "$ncu" ] || { echo "echo_ncu: no ncu (set NCU=/path/to/ncu)" >&2; exit 2; }
mkdir -p "$out" /tmp/echo_ncu_site
if ls "$repo"/.gpu/whl/*.whl >/dev/null 2>&1; then
  "$python" -m pip install -q --no-index --no-deps --no-compile --target /tmp/echo_ncu_site "$repo"/.gpu/whl/*.whl
fi
work=$(mktemp -d)
km=$work/kernel_metric
cp -r "$echo_dir/kernel_metric" "$km"
# global_config.json filled in as Echo's update_configs.py does: this machine's ncu and python, GPU 0
cat > "$km/input/global_config.json" <<JSON
{"cuda_visible_devices": "0", "cuda_version_check": "$("$python" -c 'import torch; print(torch.version.cuda)')",
 "ncu_path": "$ncu", "python_path": "$python", "nsys_path": "$(command -v nsys || echo nsys)"}
JSON
"$python" - "$km/input/local_config.json" "$EPOCHS" <<'PY'
import json, sys
path, epochs = sys.argv[1], int(sys.argv[2])
config = json.load(open(path))
config["epochs"] = epochs
json.dump(config, open(path, "w"))
PY
sed -i "s/\[(example, labels)\] \* 100/[(example, labels)] * $ITERS/" "$km/input/define_model.py"
grep -q "\* $ITERS" "$km/input/define_model.py" || { echo "echo_ncu: define_model.py has no '* 100' data loader" >&2; exit 2; }
narrow=(--replay-mode "$REPLAY")
[ "$REPLAY" = application ] && narrow+=(--app-replay-buffer file)
[ "$LAUNCH_COUNT" != 0 ] && narrow+=(--launch-count "$LAUNCH_COUNT")
profile=(env CUDA_VISIBLE_DEVICES=0 "$ncu" -o temp/output --profile-from-start off -f "${narrow[@]}"
         --target-processes all --device 0 --nvtx
         --section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis
         "$python" input/train_script.py --world_size=1 --local_config_file=input/local_config.json
         --global_config_file=input/global_config.json)
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
  "$ncu" --version | tail -1
  "$python" -c 'import torch, pandas, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda,
"pandas", pandas.__version__, "transformers", transformers.__version__)' || true
} > "$out/versions.txt" 2>&1
printf '%q ' "${profile[@]}" > "$out/commands.txt"
{ echo; echo "$ncu -i temp/output.ncu-rep --page details --csv --log-file temp/output_details.csv"
  echo "$ncu -i temp/output.ncu-rep --page raw --csv --log-file temp/output_raw.csv"
  echo "$ncu -i temp/output.ncu-rep --print-kernel-base function --csv > temp/output_kshortname.csv"
  echo "$python ncu_report_process.py   # Echo's, unmodified"; } >> "$out/commands.txt"
start=$SECONDS
(
  cd "$km" && mkdir -p temp output
  export PYTHONPATH="$echo_dir${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
  timeout "$LIMIT" "${profile[@]}"
  echo "echo_ncu: profiling took $((SECONDS - start)) s"
  # Echo's three exports and its script, as run.sh runs them
  "$ncu" -i temp/output.ncu-rep --page details --csv --log-file temp/output_details.csv
  "$ncu" -i temp/output.ncu-rep --page raw --csv --log-file temp/output_raw.csv
  "$ncu" -i temp/output.ncu-rep --print-kernel-base function --csv > temp/output_kshortname.csv
  "$python" ncu_report_process.py
) 2>&1 | tee "$out/run.log"
cp "$km"/temp/output.ncu-rep "$km"/temp/output_*.csv "$km/output/kernel_metric_output.csv" \
   "$km/input/global_config.json" "$km/input/local_config.json" "$out"/
rm -rf "$work"
hp=(env PYTHONPATH="/tmp/echo_ncu_site:$repo" "$python" -m hpcprof ncu metrics)
cd "$out"
"${hp[@]}" output_details.csv --layout echo --kshortname output_kshortname.csv -o hpcprof_echo.csv 2>> run.log
"${hp[@]}" output.ncu-rep --layout echo --ncu "$ncu" -o hpcprof_echo_rep.csv 2>> run.log
"${hp[@]}" output_details.csv --format csv -o hpcprof_default.csv 2>> run.log
rows=$(($(wc -l < kernel_metric_output.csv) - 1))
for ours in hpcprof_echo.csv hpcprof_echo_rep.csv; do
  if cmp -s kernel_metric_output.csv "$ours"; then
    echo "$ours: identical to Echo's kernel_metric_output.csv ($rows rows)"
  else
    echo "$ours: DIFFERENT from Echo's kernel_metric_output.csv ($rows rows):"; diff kernel_metric_output.csv "$ours" | head -20
  fi
done | tee compare.txt
echo "echo_ncu: wrote $out in $((SECONDS - start)) s"
