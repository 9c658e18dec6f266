#!/bin/bash
# Per-rank-file cost of two versions of hpcprof on the same GPU-machine host (hosts differ up to 1.8x, so a
# before/after taken on two calls says little): benchmarks/collect_file.py of the old version (a `git archive`
# of hpcprof/ and the two collect benchmarks in the git-ignored, carried .gpu/old) and of the working tree,
# alternated ROUNDS times (default 4), each with --repeat REPEAT (default 60). Compare the best of each column;
# single runs vary by 1.5x on these shared vCPUs. No network: hpcprof's dependencies from the carried .gpu/whl.
# Prepare here:  rm -rf .gpu/old && mkdir -p .gpu/old && git archive OLD hpcprof site_configs templates \
#                  benchmarks/collect_file.py benchmarks/collect_scale.py | tar -x -C .gpu/old
# Run there (carry .gpu):  bash benchmarks/gpu/collect_file_ab.sh > $OUT/ab.txt
set -u
source benchmarks/gpu/collect_env.sh
ln -sfn "$PWD/tests" .gpu/old/tests
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); old: .gpu/old, new: the working tree;" \
     "benchmarks/collect_file.py --repeat ${REPEAT:-60}, alternated"
for i in $(seq "${ROUNDS:-4}"); do
  for version in old new; do
    dir=.; [ $version = old ] && dir=.gpu/old
    echo "== $version, round $i"
    python3 $dir/benchmarks/collect_file.py --repeat "${REPEAT:-60}" | grep -E "^floor|^analyse|^map_|^per rank|^ratio"
  done
done
