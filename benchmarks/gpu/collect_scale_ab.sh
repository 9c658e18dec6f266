#!/bin/bash
# `hpcprof collect` of N rank files with many workers, two versions on the same GPU-machine host (hosts differ up to
# 1.8x, so a before/after taken on two calls says little): benchmarks/collect_scale.py of the old version (a
# `git archive` in the git-ignored, carried .gpu/old, as for collect_file_ab.sh) and of the working tree, alternated
# ROUNDS times (default 3): N (default 2048) rank exports collected with WORKERS worker processes (default 16) and
# with MPI_WORKERS mpi4py.futures workers under Open MPI (default 15; '' for none). Compare the best wall time of
# each; the phases line says where it went. No network: hpcprof's dependencies from the carried .gpu/whl.
# VERSIONS (default "old new") names the versions of a round in order; `new:VAR=VALUE` is the working tree with that
# variable in the collect's environment (e.g. new:OMP_NUM_THREADS=1: Arrow's CPU thread pool of one thread a process).
# Prepare here:  rm -rf .gpu/old && mkdir -p .gpu/old && git archive OLD hpcprof site_configs templates \
#                  benchmarks/collect_file.py benchmarks/collect_scale.py | tar -x -C .gpu/old
# Run there (carry .gpu):  bash benchmarks/gpu/collect_scale_ab.sh > $OUT/scale_ab.txt
set -u
N=${N:-2048}
source benchmarks/gpu/collect_env.sh
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); old: .gpu/old, new: the working tree;" \
     "benchmarks/collect_scale.py, N=$N, ${WORKERS:-16} workers, ${MPI_WORKERS-15} MPI workers, alternated"
for i in $(seq "${ROUNDS:-3}"); do
  for version in ${VERSIONS:-old new}; do
    dir=.; [ "$version" = old ] && dir=.gpu/old
    setting=(); [ "${version#*:}" != "$version" ] && setting=("${version#*:}")
    echo "== $version, round $i"
    env "${setting[@]}" python3 $dir/benchmarks/collect_scale.py --sizes "$N" --serial-max 0 --workers-list "${WORKERS:-16}" \
      --mpi-n "$N" --mpi-workers "${MPI_WORKERS-15}" --cross-sizes '' | grep -E "workers|mpi4py|phases"
  done
done
