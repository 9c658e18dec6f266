# Sourced by the collect benchmarks of benchmarks/gpu (collect_cores.sh, collect_file_ab.sh, collect_scale_ab.sh), run in
# the repository root on the GPU machine (no network): hpcprof's dependencies from the carried, git-ignored .gpu/whl
# into /tmp/site, and the two H200 seqpar rank exports the benchmarks read, unpacked into $HPCPROF_FIXTURES (the
# repository keeps them xz-compressed, tests/fixture_files.py). Root may run Open MPI.
mkdir -p /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $(ls .gpu/whl*/*.whl) 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 HPCPROF_FIXTURES=/tmp/collect-fixtures
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$HPCPROF_FIXTURES/nsys/h200_seqpar_bf16"
for r in 0 1; do
  python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
    tests/fixtures/nsys/h200_seqpar_bf16/rank$r.sqlite.xz "$HPCPROF_FIXTURES/nsys/h200_seqpar_bf16/rank$r.sqlite"
done
