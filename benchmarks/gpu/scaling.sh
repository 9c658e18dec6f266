#!/bin/bash
# A sweep over world size on the lent GPU machine, explained: seqpar, hpcprof's DDP harness and
# examples/dp_trainer.py on FSDP2 (`fully_shard`, a `command`) at 1, 2 and, where the machine has 4
# GPUs, 4 ranks under torch.profiler; then the trainer on DDP with a planted straggler (the last rank
# sleeps LATE_MS before every step's forward). Each sweep is collected and reported: the report's
# scaling view gives per point the median step, the efficiency against 1 rank and the time lost per
# step by cause (late ranks, exposed collective transfer, other; gained where the ranks' own work ran
# faster; the transfer compute hid apart), checked to add up; `hpcprof trace nccl` and
# `trace critical-path --waits` the FSDP all-gathers and reduce-scatters per size bucket and their
# transfer/wait split. The last lines check the planted straggler: PASS where the largest world's
# report names the last rank with a cost within 40 % of LATE_MS.
#   bash benchmarks/gpu/scaling.sh OUT        (about 3-6 min on 2 or 4 H200; writes OUT/scaling.txt,
#   OUT/report_<sweep>.txt, OUT/fsdp_busbw.csv; each sweep in OUT/runs/<sweep>)
# Needs (carried, git-ignored): .gpu/whl and .gpu/libs, as env.sh says.
set -u
OUT_DIR=$(mkdir -p "${1:?output directory}" && cd "$1" && pwd)
source benchmarks/gpu/env.sh
GPUS=$(nvidia-smi -L | wc -l)
# WORLDS: the sweep's ranks; LAST: the largest, at sweep point LASTP
if [ "$GPUS" -ge 4 ]; then WORLDS="1, 2, 4" SITE=$REPO/benchmarks/gpu/site-h200x4.yaml LAST=4 LASTP=p002
else WORLDS="1, 2" SITE=$REPO/benchmarks/gpu/site-h200x2.yaml LAST=2 LASTP=p001; fi
SWEEP="{resources.ranks_per_node: [$WORLDS]}"
# the DDP harness checks workload.args.world_size (Echo's local_config says 2): swept with the ranks
DDP_SWEEP="{'resources.ranks_per_node,workload.args.world_size': [$(sed -E 's/([0-9]+)/[\1, \1]/g' <<< "$WORLDS")]}"
LATE_MS=${LATE_MS:-5}
TRAINER="python3, $REPO/examples/dp_trainer.py, --steps, '25', --dim, '2048', --layers, '8', --batch, '512'"

run() {   # name experiment sweep [--set ...]: submit the sweep in a workdir of its own, collect it,
          # print its scaling view (the report's last section) and keep the whole report
  local name=$1 exp=$2 sweep=$3
  shift 3
  WORKDIR=$OUT_DIR/runs/$name
  python3 -m hpcprof submit "$REPO/benchmarks/gpu/scaling/$exp" --site-file "$SITE" --workdir "$WORKDIR" \
    --set "sweep=$sweep" "$@" --wait > "$OUT_DIR/submit_$name.log" 2>&1
  python3 -m hpcprof collect --workdir "$WORKDIR" > "$OUT_DIR/collect_$name.log" 2>&1
  echo "=== $name"
  COLUMNS=250 python3 -m hpcprof report --workdir "$WORKDIR" > "$OUT_DIR/report_$name.txt" 2>&1
  sed -n '/ scaling /,$p' "$OUT_DIR/report_$name.txt"
  python3 - "$WORKDIR" <<'PY'
import sys
from pathlib import Path
from hpcprof.report import sweep
from hpcprof.report.runs import load, select_runs
infos = load(select_runs((), Path(sys.argv[1])), require_collected=False, one_workload=False)
df = sweep.scaling(sweep.sweep_points([i for i in infos if i.metrics], None))
if not df.empty:
    parts = df["late_ms"] + df["exposed_ms"] + df["other_ms"] - df["gained_ms"]
    ok = bool(((parts - df["lost_ms"]).abs() < 1e-9).all()
              and (df[["other_ms", "gained_ms", "exposed_ms", "overlapped_ms"]] >= 0).all().all())
    print(f"{'PASS' if ok else 'FAIL'} split: late + exposed + other - gained = lost, no part negative, "
          f"at {len(df)} points")
PY
  grep -hE "^─+ .* FAILED ─+$" "$OUT_DIR/report_$name.txt" | sed 's/^─* */  /; s/ ─*$//'    # failed points
}

{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sort | uniq -c
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
  start=$SECONDS
  run seqpar seqpar.yaml "$SWEEP"
  run ddp ddp.yaml "$DDP_SWEEP"
  run fsdp trainer.yaml "$SWEEP" --set "workload.argv=[$TRAINER, --strategy, fsdp]"
  fsdp=$(ls -d "$WORKDIR"/scaling-trainer/*-$LASTP | tail -1)
  echo "=== FSDP2 at $LAST ranks: busbw per collective and size bucket, transfer against wait"
  python3 -m hpcprof trace nccl "$fsdp/profiles/torch" --format csv > "$OUT_DIR/fsdp_busbw.csv"
  python3 - "$OUT_DIR/fsdp_busbw.csv" <<'PY'
import sys
import pandas as pd
t = pd.read_csv(sys.argv[1], keep_default_na=False, na_values=[""], dtype={"rank": "Int64"})
cols = ["scope", "rank", "group", "collective", "bucket", "count", "bytes", "median_ns", "algbw_gbps", "busbw_gbps"]
print(t[cols].to_string(index=False))
sized = t[t["bytes"].notna()]
print(f"algbw filled on {int(sized['algbw_gbps'].notna().sum())} of {len(sized)} sized rows, busbw on "
      f"{int(sized['busbw_gbps'].notna().sum())}")
PY
  python3 -m hpcprof trace critical-path --waits "$fsdp/profiles/torch"
  run straggler trainer.yaml "$SWEEP" --set "workload.argv=[$TRAINER, --strategy, ddp, --late-rank, '$((LAST - 1))', --late-ms, '$LATE_MS']"
  echo "=== planted straggler: rank $((LAST - 1)) sleeps $LATE_MS ms a step at $LAST ranks"
  late=$(ls -d "$WORKDIR"/scaling-trainer/*-$LASTP | tail -1)
  python3 - "$late" "$((LAST - 1))" "$LATE_MS" <<'PY'
import sys
from pathlib import Path
from hpcprof.analysis.clocks import aligned
from hpcprof.analysis.stragglers import per_step, straggler
from hpcprof.run.results import read_table
run, rank, late_ms = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
events, _ = aligned(read_table(run, "torch_critical_path_events"))
found = straggler(events, per_step(events))
print(found.sentence() if found else "no straggler found")
ok = found is not None and found.rank == rank and abs(found.median_late_ns / 1e6 - late_ms) <= 0.4 * late_ms
print(f"{'PASS' if ok else 'FAIL'} straggler: rank {found.rank if found else None}, delays a step by "
      f"{found.median_late_ns / 1e6 if found else 0:.2f} ms against {late_ms} ms planted on rank {rank}")
PY
  echo "total $((SECONDS - start)) s"
} 2>&1 | tee "$OUT_DIR/scaling.txt"
