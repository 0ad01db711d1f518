# Sourced by the scripts that build: KVSCOPE_JOBS, the parallel compile jobs, defaults to the
# machine's processors. Not plain `nproc`: it honours OMP_NUM_THREADS, which scripts/test.sh sets
# to 1 for LibTorch's kernels; the sanitizer tree built with one job on a 2-core machine for
# that (docs/limits.md).
: "${KVSCOPE_JOBS:=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}"
