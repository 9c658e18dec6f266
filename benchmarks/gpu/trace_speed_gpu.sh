#!/bin/bash
# trace_speed.py's speed goal on a many-core GPU machine (its CPUs only): benchmarks/trace_speed.py, hpcprof against HTA 0.5.0 on
# the 2 x 72 MB case (the H200 DDP fixture's events repeated), on an idle machine with more cores than ranks.
# No network there, so wheels are carried (call `run` with carry [".gpu/trace"]): what hpcprof's trace analyses need
# beyond the machine's packages (msgspec, isal, typing_extensions) in .gpu/trace/hpcprof, and HTA 0.5.0 with plotly,
# pydot and pandas 2.3.3 (HTA needs pandas < 3) in .gpu/trace/hta, installed into a directory of their own that
# hpcprof's run never sees (HTA's run uses the machine's numpy, networkx, narwhals, pyparsing). Fetch them here with
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .gpu/trace/hta \
#     HolisticTraceAnalysis==0.5.0 plotly pydot pandas==2.3.3
# and the same with -d .gpu/trace/hpcprof msgspec isal typing_extensions.
# The last rows, collect's map of the same files, need collect's dependencies too (.gpu/whl, see collect_env.sh): with
# HTA's wheels that is more than one call may carry, so call `run` twice on the same warm machine, first with carry
# [".gpu/trace"] (installs HTA under /tmp, which stays while the machine is held), then with [".gpu/whl"].
# Usage (in the repository root there): bash benchmarks/gpu/trace_speed_gpu.sh OUT_DIR [REPEAT]
set -eu
OUT_DIR=${1:?output directory}
REPEAT=${2:-3}
mkdir -p "$OUT_DIR" /tmp/site /tmp/hta-site
if [ -d .gpu/trace/hta ]; then
  python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/hta-site .gpu/trace/hta/*.whl 2>/dev/null
fi
[ -d /tmp/hta-site/hta ] || { echo "HTA is not installed here: carry .gpu/trace (see above)"; exit 2; }
python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/site \
  $(ls .gpu/trace/hpcprof/*.whl .gpu/whl/*.whl 2>/dev/null | awk -F/ '!seen[$NF]++') 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
printf '#!/bin/sh\nPYTHONPATH=/tmp/hta-site exec python3 "$@"\n' >/tmp/hta-python
chmod +x /tmp/hta-python
export PYTHONPATH=$PYTHONPATH:$PWD
{
  echo "# $(date -u +%FT%TZ) $(hostname): $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  lscpu | grep -E "^Model name" | sed 's/^/# /'
  python3 -c 'import sys, msgspec, pandas; print("# hpcprof: python", sys.version.split()[0], "pandas", pandas.__version__, "msgspec", msgspec.__version__)'
  /tmp/hta-python -c 'import importlib.metadata as m, pandas; print("# HTA", m.version("HolisticTraceAnalysis"), "pandas", pandas.__version__)'
  echo "# hpcprof $(git describe --always --dirty 2>/dev/null)"
  python3 benchmarks/trace_speed.py --fixtures h200_ddp_gpt2 --target-mb 72 --repeat "$REPEAT" --workdir /tmp/tr \
    --hta-python /tmp/hta-python
} 2>&1 | tee "$OUT_DIR/trace_speed_gpu.txt"
