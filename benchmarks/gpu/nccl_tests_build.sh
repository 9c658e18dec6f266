# Sourced by the nccl-tests scripts (ceilings.sh, ceilings_small_probe.sh) from the repository root: builds
# nccl-tests (source carried, git-ignored, in .gpu/nccl-tests: NVIDIA/nccl-tests) into /tmp/nccl-tests/build
# against the NCCL of the pip wheel torch uses; sets LAUNCH (mpirun -np 2 where an MPI compiler is: two
# processes, one GPU each, as hpcprof's ranks; else empty: one process driving both GPUs) and GPUS (-g).
mkdir -p /tmp/nccl/lib
# the NCCL of torch's pip wheel (nvidia-nccl-cu12: nvidia/nccl/{include,lib}; cu13 wheels may nest it
# deeper, so looked for under every nvidia namespace path); nccl-tests links -lnccl: libnccl.so
NVIDIA_DIRS=$(python3 -c 'import nvidia; print(" ".join(nvidia.__path__))')
NCCL_H=$(find $NVIDIA_DIRS -name nccl.h | head -n 1)
NCCL_SO=$(find $NVIDIA_DIRS -name 'libnccl.so*' | head -n 1)
echo "NCCL: $NCCL_H $NCCL_SO"
[ -n "$NCCL_H" ] && [ -n "$NCCL_SO" ] || { echo "no nccl.h/libnccl.so in the nvidia wheels ($NVIDIA_DIRS)"; exit 1; }
ln -sfn "$(dirname "$NCCL_H")" /tmp/nccl/include
ln -sf "$NCCL_SO" /tmp/nccl/lib/libnccl.so
ln -sf "$NCCL_SO" "/tmp/nccl/lib/$(basename "$NCCL_SO")"
export LD_LIBRARY_PATH=/tmp/nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
rm -rf /tmp/nccl-tests && cp -r .gpu/nccl-tests /tmp/nccl-tests
# two processes, one GPU each (MPI=1, mpirun -np 2 -g 1), as torchrun runs hpcprof's ranks; without an MPI
# compiler, one process driving both GPUs (MPI=0, -g 2), which NCCL serves with other means (e.g. copy engines)
if command -v mpicc >/dev/null; then
  mkdir -p /tmp/mpi   # MPI_HOME/include and /lib as nccl-tests' Makefile wants them, from Open MPI's wrapper
  ln -sfn "$(mpicc --showme:incdirs | cut -d' ' -f1)" /tmp/mpi/include
  ln -sfn "$(mpicc --showme:libdirs | cut -d' ' -f1)" /tmp/mpi/lib
  BUILD=(MPI=1 MPI_HOME=/tmp/mpi); LAUNCH=(mpirun --allow-run-as-root --oversubscribe -np 2 -x NCCL_NVLS_ENABLE
    -x LD_LIBRARY_PATH); GPUS=1
else
  BUILD=(MPI=0); LAUNCH=(); GPUS=2
fi
echo "nccl-tests: ${BUILD[*]} ${LAUNCH[*]} -g $GPUS"
make -C /tmp/nccl-tests/src -j 16 "${BUILD[@]}" NCCL_HOME=/tmp/nccl CUDA_HOME=/usr/local/cuda \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=/tmp/nccl-tests/build >/dev/null || exit 1
