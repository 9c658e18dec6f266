#!/bin/bash
# How often a 2-rank gloo job of examples/dp_trainer.py under torch.profiler hangs at exit: the
# 2-rank point of tests/data/dp_scaling_cpu.yaml submitted N times on the local site, one at a
# time. A run not DONE within 90 s is a hang: the native stacks of its processes (gdb) are kept in
# its folder (gdb.txt) and its processes killed. Prints "ok I SECONDS" or "HANG I" per run.
#   bash benchmarks/gloo_exit_hang.sh [N] [WORKDIR]      (N default 15, WORKDIR default /tmp/gloo-exit-hang)
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
N=${1:-15}
WORK=${2:-/tmp/gloo-exit-hang}
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH} PATH=$REPO/.venv/bin:$PATH
for i in $(seq 1 "$N"); do
  d=$WORK/r$i; rm -rf "$d"; mkdir -p "$d"; cd "$d" || exit 1
  sed -e 's/  resources.ranks_per_node: \[1, 2, 4\]/  resources.ranks_per_node: [2]/' \
      -e "s#examples/dp_trainer.py#$REPO/examples/dp_trainer.py#" "$REPO/tests/data/dp_scaling_cpu.yaml" > exp.yaml
  python -m hpcprof submit exp.yaml --site local > submit.log 2>&1
  t=0
  while [ $t -lt 90 ] && ! ls hpcprof-runs/*/*/DONE > /dev/null 2>&1; do sleep 2; t=$((t + 2)); done
  if [ $t -ge 90 ]; then
    echo "HANG $i"
    for p in $(pgrep -f dp_trainer.py); do
      echo "== pid $p $(tr '\0' ' ' < /proc/$p/cmdline)"
      gdb -p "$p" -batch -ex "thread apply all bt 12" 2> /dev/null | grep -E "^#|^Thread" | head -80
    done > gdb.txt
    pkill -f dp_trainer.py; sleep 5
  else
    echo "ok $i $t"
  fi
done
