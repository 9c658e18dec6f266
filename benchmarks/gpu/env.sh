# The lent GPU machine's set-up for hpcprof's GPU scripts, sourced from the repository root (sets REPO): hpcprof's
# wheels (.gpu/whl, carried) into /tmp/site on PYTHONPATH with the checkout, nsys's libdw/libelf (.gpu/libs:
# shared/tools/gpu-nsys-libs.sh) and the nsys inside Nsight Compute on PATH, beside the python that holds PyTorch.
REPO=$(pwd)
mkdir -p /tmp/site /tmp/bin
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/whl/*.whl
export PYTHONPATH=/tmp/site:$REPO PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$REPO/.gpu/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ln -sf "$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | tail -1)" /tmp/bin/nsys
export PATH=/tmp/bin:$(dirname "$(command -v python3)"):$PATH
