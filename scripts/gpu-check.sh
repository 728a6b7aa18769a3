#!/usr/bin/env bash
# The GPU check, in one go (under 8 minutes): the [gpu] kernel tests and the kernel benchmark on a
# CUDA machine, results under OUT (default ./gpu-results). Uses binaries built by this repository's
# CMake (build/), or builds the two programs with nvcc alone when the CMake build is not there (the
# GPU machine need not have SimGrid or yaml-cpp).
#   scripts/gpu-check.sh [--quick]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$root/gpu-results}"
bin="${MEMTWIN_GPU_BIN:-$root/build}"
mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/nvidia-smi.csv" 2>&1
runnable() { [ -x "$1" ] && ! ldd "$1" 2>/dev/null | grep -q "not found"; }
if ! runnable "$bin/memtwin_gpu_tests" || ! runnable "$bin/memtwin_kernels_bench"; then
  bin=/tmp/memtwin-gpu
  mkdir -p "$bin"
  sources="$root/kernels/cpu/half.cpp $root/kernels/cpu/quantize.cpp $root/kernels/cpu/decode_attention.cpp"
  # The *_avx2.cpp, *_avx512.cpp and *_vnni.cpp files without -mavx2 / -mavx512f compile to their "not available"
  # stubs: the portable kernels run.
  sources="$sources $root/kernels/cpu/decode_attention_avx2.cpp $root/kernels/cpu/decode_attention_avx512.cpp $root/kernels/cpu/decode_attention_vnni.cpp"
  sources="$sources $root/kernels/cpu/decode_attention_vnni_values.cpp $root/kernels/cpu/kivi_vnni_keys.cpp $root/kernels/cpu/host_pages.cpp"
  sources="$sources $root/kernels/cpu/quantize_avx2.cpp $root/kernels/cpu/kivi.cpp $root/kernels/cpu/kivi_paged.cpp"
  sources="$sources $root/kernels/cpu/kivi_decode_avx2.cpp $root/kernels/cpu/kivi_decode_avx512.cpp $root/kernels/cpu/eviction.cpp"
  sources="$sources $root/kernels/cuda/decode_attention.cu $root/kernels/cuda/write_paged.cu"
  sources="$sources $root/kernels/cuda/kivi_keys.cu $root/kernels/cuda/eviction.cu $root/kernels/cuda/paged_scores.cu"
  sources="$sources $root/kernels/cuda/kivi_paged.cu"
  flags="-O3 -std=c++17 -I$root -gencode arch=compute_90,code=sm_90 --use_fast_math -Xcompiler -fopenmp"
  nvcc $flags $sources "$root/tests/gpu/test_kernels_gpu.cpp" "$root/tests/gpu/test_compression_gpu.cpp" "$root/tests/gpu/test_scores_gpu.cpp" "$root/tests/gpu/test_kivi_gpu.cpp" -o "$bin/memtwin_gpu_tests" > "$out/build.log" 2>&1
  nvcc $flags -DMEMTWIN_WITH_CUDA $sources "$root/tools/bench_kernels.cpp" "$root/tools/bench_workloads.cpp" "$root/tools/bench_kernels_cuda.cpp" -o "$bin/memtwin_kernels_bench" >> "$out/build.log" 2>&1
fi
timeout 120 "$bin/memtwin_gpu_tests" > "$out/gpu_tests.txt" 2>&1
echo "gpu tests exit $?" | tee -a "$out/status.txt"
timeout 300 "$bin/memtwin_kernels_bench" --device cuda "$@" > "$out/kernels_bench_cuda.txt" 2>&1
echo "kernel bench exit $?" | tee -a "$out/status.txt"
cat "$out/gpu_tests.txt" "$out/kernels_bench_cuda.txt"
