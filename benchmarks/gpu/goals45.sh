#!/bin/bash
# The speed goal benchmark (benchmarks/nsys_stats_speed.py: all six goals in one run, against nsys 2022.4 and HTA
# 0.5.0) on the lent GPU machine's CPUs (no GPU used): the many-core host users run hpcprof on, beside the 2-vCPU
# development machine the results in benchmarks/results/nsys_stats_speed.txt come from.
#
# Nothing can be fetched there and one call carries at most 64 MiB with the checkout (43 MiB), so the set-up travels
# in four calls, made here first by `pack` (git-ignored, under .gpu/):
#   .gpu/whl, .gpu/whl2  hpcprof's dependencies the machine's python3 lacks (wheels for its Python 3.12)
#   .gpu/nsys            nsys 2022.4's `stats` (Debian non-free nsight-systems-target, tests/services/nsys.sh): nsys,
#                        reports/, python/, rules/ and sqlite3, xz-compressed (10 MB; the package is 177 MB): `nsys stats`
#                        writes the same bytes from them as from the whole package
#   .gpu/plotly          plotly, for hpcprof and HTA
#   .gpu/hta             HolisticTraceAnalysis 0.5.0 with pandas 2.3.3, pytz, tzdata (HTA 0.5.0 needs pandas < 3)
#   .gpu/mpich           MPICH's wheel (Hydra's mpiexec, as on the development machine; the machine's own is Open MPI's)
# Steps (device calls, the machine kept warm between them; each call carries the folders its setup names):
#   pack                  (here) the folders above
#   setup FOLDER...       installs them: wheels into /tmp/site, nsys into /tmp/goals45/nsys, HTA's into /tmp/goals45/hta
#                         (plotly into both: /tmp/goals45/hta-python, the machine's python3 with them first on its
#                         path, is HTA's own environment), MPICH into /tmp/goals45/mpich (first on the benchmark's PATH).
#                         In order: setup .gpu/nsys .gpu/whl; setup .gpu/whl2 .gpu/plotly; setup .gpu/hta; setup .gpu/mpich
#   start OUT [ARGS...]   copies the checkout to /tmp/goals45/repo and runs the benchmark there in its own process
#                         session (it outlasts one call's 10 minutes; ARGS go to it, default --repeat 5), its log
#                         /tmp/goals45/goals.log; waits up to WAIT seconds (default 540) and copies the log to OUT
#   wait OUT              waits up to WAIT seconds more for the benchmark to end; the log to OUT
set -u
STEP=${1:?pack, setup FOLDER..., start OUT or wait OUT}
G=/tmp/goals45
NSYS_PACKAGE=/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64
PIP_312=(--only-binary=:all: --no-deps --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
         --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
install() { python3 -m pip install -q --no-index --no-deps --no-compile --target "$1" "${@:2}"; }
log_until_done() {     # $1: output folder; waits until the benchmark's process has ended or WAIT seconds passed
  local end=$((SECONDS + ${WAIT:-540}))
  while kill -0 "$(cat $G/pid)" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 5; done
  mkdir -p "$1" && cp $G/goals.log "$1/"
  if kill -0 "$(cat $G/pid)" 2>/dev/null; then echo "goals45: still running after ${WAIT:-540} s"; else echo "goals45: ended"; fi
  cat $G/goals.log
}
case "$STEP" in
  pack)
    rm -rf .gpu/whl .gpu/whl2 .gpu/nsys .gpu/hta .gpu/plotly .gpu/mpich && mkdir -p .gpu/nsys "$G/pack/target-linux-x64"
    python3 -m pip download -q "${PIP_312[@]}" -d .gpu/whl msgspec==0.22.0 openpyxl==3.1.5 et_xmlfile==2.0.0 \
      adbc-driver-manager==1.13.0 adbc-driver-sqlite==1.13.0
    python3 -m pip download -q "${PIP_312[@]}" -d .gpu/whl2 SQLAlchemy==2.1.9 apsw==3.54.1.0
    python3 -m pip download -q "${PIP_312[@]}" -d .gpu/hta HolisticTraceAnalysis==0.5.0 pandas==2.3.3 pytz==2026.6 \
      tzdata==2026.6
    python3 -m pip download -q "${PIP_312[@]}" -d .gpu/plotly plotly==7.1.0
    python3 -m pip download -q "${PIP_312[@]}" -d .gpu/mpich mpich==5.0.2
    cp -a "$NSYS_PACKAGE"/{nsys,reports,python,rules,sqlite3} "$G/pack/target-linux-x64/"
    tar cf - -C "$G/pack" target-linux-x64 | xz -6 -T2 > .gpu/nsys/nsys-2022.4-stats.tar.xz
    du -sh .gpu/* ;;
  setup)
    mkdir -p /tmp/site "$G/nsys" "$G/hta"
    for folder in "${@:2}"; do
      case "$folder" in
        .gpu/nsys) tar xJf .gpu/nsys/*.tar.xz -C "$G/nsys" && "$G/nsys/target-linux-x64/nsys" --version ;;
        .gpu/hta) install "$G/hta" .gpu/hta/*.whl ;;
        .gpu/plotly) install "$G/hta" .gpu/plotly/*.whl && install /tmp/site .gpu/plotly/*.whl ;;
        .gpu/mpich) install "$G/mpich" .gpu/mpich/*.whl && "$G/mpich/bin/mpiexec" --version | head -2 ;;
        *) install /tmp/site "$folder"/*.whl ;;
      esac || exit 1
    done
    printf '#!/bin/sh\nPYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH} exec %s "$@"\n' "$G/hta" "$(command -v python3)" > "$G/hta-python"
    chmod +x "$G/hta-python"
    PYTHONPATH=/tmp/site:$PWD python3 -c 'import hpcprof.tools.nsys.stats.db' && echo "hpcprof's columnar engine imports"
    "$G/hta-python" -c 'import hta.trace_analysis, pandas; print("HTA imports, pandas", pandas.__version__)' 2>/dev/null
    true ;;
  start)
    OUT_DIR=${2:?output folder}; shift 2
    ARGS=("$@"); [ ${#ARGS[@]} -eq 0 ] && ARGS=(--repeat 5)
    rm -rf "$G/repo" && cp -a . "$G/repo" && cd "$G/repo" || exit 1
    # goal 4's local run starts its ranks with the local site's launcher (flavor: auto): MPICH's Hydra, as here
    export PYTHONPATH=/tmp/site:$G/repo PYTHONUNBUFFERED=1 PATH=$G/mpich/bin:$PATH   # MPICH's mpiexec first
    python3 -m compileall -q hpcprof /tmp/site > /dev/null
    {
      echo "# $(date -u +%FT%TZ): $(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p')), load average $(cut -d' ' -f1-3 /proc/loadavg); $(python3 -c 'import sys, numpy, pandas, pyarrow; print("Python", sys.version.split()[0], "numpy", numpy.__version__, "pandas", pandas.__version__, "pyarrow", pyarrow.__version__)')"
      echo "# python3 benchmarks/nsys_stats_speed.py --nsys $G/nsys/target-linux-x64/nsys --hta-python $G/hta-python --work $G/work ${ARGS[*]}"
    } > $G/goals.log
    setsid python3 benchmarks/nsys_stats_speed.py --nsys "$G/nsys/target-linux-x64/nsys" --hta-python "$G/hta-python" \
      --work "$G/work" "${ARGS[@]}" >> $G/goals.log 2>&1 < /dev/null &
    echo $! > $G/pid
    log_until_done "$OUT_DIR" ;;
  wait)
    log_until_done "${2:?output folder}" ;;
  *) echo "goals45.sh: unknown step '$STEP' (pack, setup FOLDER..., start OUT, wait OUT)" >&2; exit 2 ;;
esac
