// memtwin_device_probe: measures the device facts the memory and time models take as parameters,
// the nccl-tests way (warm-up, timed repeats with CUDA events, correctness checked):
//   * memory as CUDA reports it (the catalog's `memory`), and what the CUDA context, cuBLAS (handle,
//     workspace, GEMM kernels) and an NCCL communicator take before any tensor (cluster.runtime.*);
//   * the allocation granularity of cudaMalloc (why small tensors cost more than their bytes);
//   * device-to-device copy bandwidth (bytes read + written), host<->device over PCIe (pinned);
//   * dense bf16 GEMM throughput for square and transformer-shaped products (cuBLAS, fp32 accumulate).
// Prints one JSON document. NCCL is loaded at run time (dlopen) so the probe runs where only the
// CUDA runtime and cuBLAS are installed; its figure is then reported as absent.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

#define CHECK_CUDA(call)                                                                        \
  do {                                                                                          \
    cudaError_t err_ = (call);                                                                  \
    if (err_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "memtwin_device_probe: %s failed: %s\n", #call, cudaGetErrorString(err_)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

#define CHECK_CUBLAS(call)                                                                  \
  do {                                                                                      \
    cublasStatus_t st_ = (call);                                                            \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                                     \
      std::fprintf(stderr, "memtwin_device_probe: %s failed: status %d\n", #call, (int)st_); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

long long used_bytes() {
  size_t free_b = 0, total_b = 0;
  CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
  return static_cast<long long>(total_b - free_b);
}

// Times `fn` (which enqueues work on the default stream) over `repeats` after `warmup` runs.
template <class F>
double time_ms(F fn, int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i) fn();
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  CHECK_CUDA(cudaEventRecord(start));
  for (int i = 0; i < repeats; ++i) fn();
  CHECK_CUDA(cudaEventRecord(stop));
  CHECK_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  return ms / repeats;
}

// x[i] = a small value that depends on i, in bf16.
__global__ void fill_bf16(__nv_bfloat16* x, size_t n, float scale) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] = __float2bfloat16(scale * static_cast<float>((i * 2654435761u) % 97) / 97.0f - scale / 2);
}

// One bf16 GEMM C[m,n] = A[m,k] B[k,n] with fp32 accumulation; returns TFLOP/s.
// Correctness: C computed from all-ones operands must equal k exactly.
struct GemmResult {
  double tflops = 0;
  bool correct = false;
};

GemmResult gemm(cublasHandle_t handle, int m, int n, int k) {
  __nv_bfloat16 *a, *b, *c;
  // [m, k], [k, n], [m, n] column-major as cuBLAS takes them
  CHECK_CUDA(cudaMalloc(&a, sizeof(__nv_bfloat16) * m * static_cast<size_t>(k)));
  CHECK_CUDA(cudaMalloc(&b, sizeof(__nv_bfloat16) * k * static_cast<size_t>(n)));
  CHECK_CUDA(cudaMalloc(&c, sizeof(__nv_bfloat16) * m * static_cast<size_t>(n)));
  const float alpha = 1, beta = 0;
  auto run = [&] {
    CHECK_CUBLAS(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a, CUDA_R_16BF, m, b, CUDA_R_16BF, k,
                              &beta, c, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  // Correctness with ones: every output is k (exact in bf16 for k a power of two up to 2^8 x 2^8).
  std::vector<__nv_bfloat16> ones(std::max<size_t>(static_cast<size_t>(m) * k, static_cast<size_t>(k) * n),
                                  __float2bfloat16(1.0f));
  CHECK_CUDA(cudaMemcpy(a, ones.data(), sizeof(__nv_bfloat16) * m * static_cast<size_t>(k), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(b, ones.data(), sizeof(__nv_bfloat16) * k * static_cast<size_t>(n), cudaMemcpyHostToDevice));
  run();
  __nv_bfloat16 corner;
  CHECK_CUDA(cudaMemcpy(&corner, c, sizeof corner, cudaMemcpyDeviceToHost));
  GemmResult r;
  r.correct = std::fabs(__bfloat162float(corner) - static_cast<float>(k)) <= static_cast<float>(k) / 128;
  // Timing on random-like data (zeros and ones run faster: less switching in the tensor cores).
  fill_bf16<<<(m * static_cast<size_t>(k) + 255) / 256, 256>>>(a, m * static_cast<size_t>(k), 1.0f);
  fill_bf16<<<(k * static_cast<size_t>(n) + 255) / 256, 256>>>(b, k * static_cast<size_t>(n), 1.0f);
  CHECK_CUDA(cudaGetLastError());
  const double ms = time_ms(run, 3, 10);
  r.tflops = 2.0 * m * n * static_cast<double>(k) / (ms * 1e-3) / 1e12;
  CHECK_CUDA(cudaFree(a));
  CHECK_CUDA(cudaFree(b));
  CHECK_CUDA(cudaFree(c));
  return r;
}

// NCCL through dlopen: one rank, one all-reduce, to see the communicator's own memory.
long long nccl_bytes(std::string& status) {
  void* lib = dlopen("libnccl.so.2", RTLD_NOW);
  if (!lib) lib = dlopen("libnccl.so", RTLD_NOW);
  if (!lib) {
    status = "libnccl not found";
    return -1;
  }
  struct UniqueId { char internal[128]; };
  using GetId = int (*)(UniqueId*);
  using Init = int (*)(void**, int, UniqueId, int);
  using Destroy = int (*)(void*);
  using AllReduce = int (*)(const void*, void*, size_t, int, int, void*, cudaStream_t);
  auto get_id = reinterpret_cast<GetId>(dlsym(lib, "ncclGetUniqueId"));
  auto init = reinterpret_cast<Init>(dlsym(lib, "ncclCommInitRank"));
  auto destroy = reinterpret_cast<Destroy>(dlsym(lib, "ncclCommDestroy"));
  auto all_reduce = reinterpret_cast<AllReduce>(dlsym(lib, "ncclAllReduce"));
  if (!get_id || !init || !destroy || !all_reduce) {
    status = "libnccl lacks the expected symbols";
    return -1;
  }
  float* buf;
  CHECK_CUDA(cudaMalloc(&buf, 1 << 20));
  CHECK_CUDA(cudaDeviceSynchronize());
  const long long before = used_bytes();
  UniqueId id;
  void* comm = nullptr;
  if (get_id(&id) != 0 || init(&comm, 1, id, 0) != 0) {
    status = "ncclCommInitRank failed";
    return -1;
  }
  // ncclFloat32 = 7, ncclSum = 0
  if (all_reduce(buf, buf, (1 << 20) / sizeof(float), 7, 0, comm, 0) != 0) status = "ncclAllReduce failed";
  CHECK_CUDA(cudaDeviceSynchronize());
  const long long after = used_bytes();
  destroy(comm);
  CHECK_CUDA(cudaFree(buf));
  if (status.empty()) status = "ok (one rank: channel buffers to peers are not allocated)";
  return after - before;
}

}  // namespace

int main() {
  int device = 0;
  CHECK_CUDA(cudaSetDevice(device));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  CHECK_CUDA(cudaFree(nullptr));  // creates the context
  size_t free_b = 0, total_b = 0;
  CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
  const long long context = static_cast<long long>(total_b - free_b);

  // Allocation granularity: what a 1-byte cudaMalloc costs in device memory.
  const long long before_small = used_bytes();
  void* tiny;
  CHECK_CUDA(cudaMalloc(&tiny, 1));
  const long long granularity = used_bytes() - before_small;
  CHECK_CUDA(cudaFree(tiny));

  // cuBLAS: handle, default workspace and the first GEMM's kernels.
  const long long before_cublas = used_bytes();
  cublasHandle_t handle;
  CHECK_CUBLAS(cublasCreate(&handle));
  GemmResult warm = gemm(handle, 1024, 1024, 1024);
  CHECK_CUDA(cudaDeviceSynchronize());
  const long long cublas = used_bytes() - before_cublas;

  std::string nccl_status;
  const long long nccl = nccl_bytes(nccl_status);

  // Copy bandwidth: 2 GiB device to device; bytes read plus bytes written.
  const size_t copy_bytes = size_t{2} << 30;
  void *src, *dst;
  CHECK_CUDA(cudaMalloc(&src, copy_bytes));
  CHECK_CUDA(cudaMalloc(&dst, copy_bytes));
  CHECK_CUDA(cudaMemset(src, 1, copy_bytes));
  const double d2d_ms = time_ms([&] { CHECK_CUDA(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice)); }, 3, 20);
  unsigned char probe_byte = 0;
  CHECK_CUDA(cudaMemcpy(&probe_byte, static_cast<char*>(dst) + copy_bytes - 1, 1, cudaMemcpyDeviceToHost));
  const bool copy_correct = probe_byte == 1;

  // PCIe: 1 GiB pinned host <-> device.
  const size_t pcie_bytes = size_t{1} << 30;
  void* host;
  CHECK_CUDA(cudaMallocHost(&host, pcie_bytes));
  const double h2d_ms = time_ms([&] { CHECK_CUDA(cudaMemcpyAsync(dst, host, pcie_bytes, cudaMemcpyHostToDevice)); }, 2, 10);
  const double d2h_ms = time_ms([&] { CHECK_CUDA(cudaMemcpyAsync(host, src, pcie_bytes, cudaMemcpyDeviceToHost)); }, 2, 10);
  CHECK_CUDA(cudaFreeHost(host));
  CHECK_CUDA(cudaFree(src));
  CHECK_CUDA(cudaFree(dst));

  struct Shape { const char* name; int m, n, k; };
  const Shape shapes[] = {
      {"square_8192", 8192, 8192, 8192},
      {"llama3_8b_mlp_up_8k_tokens", 14336, 8192, 4096},   // [I, tokens] = [I, h] x [h, tokens]
      {"llama3_8b_mlp_down_8k_tokens", 4096, 8192, 14336},
      {"llama3_8b_qkv_8k_tokens", 6144, 8192, 4096},
      {"decode_batch_64", 14336, 64, 4096},                 // memory-bound: weights streamed once
  };

  std::printf("{\n  \"schema\": \"memtwin.device_probe/1\",\n");
  std::printf("  \"device\": \"%s\",\n  \"compute_capability\": \"%d.%d\",\n  \"multiprocessors\": %d,\n",
              prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::printf("  \"driver_version\": %d,\n  \"runtime_version\": %d,\n", driver, runtime);
  std::printf("  \"memory_total_bytes\": %lld,\n  \"memory_total_mib\": %lld,\n", static_cast<long long>(total_b),
              static_cast<long long>(total_b >> 20));
  std::printf("  \"context_bytes\": %lld,\n  \"cublas_bytes\": %lld,\n", context, cublas);
  std::printf("  \"nccl_one_rank_bytes\": %lld,\n  \"nccl_status\": \"%s\",\n", nccl, nccl_status.c_str());
  std::printf("  \"cuda_malloc_granularity_bytes\": %lld,\n", granularity);
  std::printf("  \"d2d_copy_bytes_per_s\": %.6e,\n  \"d2d_copy_correct\": %s,\n",
              2.0 * copy_bytes / (d2d_ms * 1e-3), copy_correct ? "true" : "false");
  std::printf("  \"h2d_pinned_bytes_per_s\": %.6e,\n  \"d2h_pinned_bytes_per_s\": %.6e,\n",
              pcie_bytes / (h2d_ms * 1e-3), pcie_bytes / (d2h_ms * 1e-3));
  std::printf("  \"gemm_bf16\": [\n");
  bool all_correct = warm.correct;
  for (size_t i = 0; i < std::size(shapes); ++i) {
    const Shape& s = shapes[i];
    GemmResult r = gemm(handle, s.m, s.n, s.k);
    all_correct = all_correct && r.correct;
    std::printf("    {\"name\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"tflops\": %.1f, \"correct\": %s}%s\n", s.name, s.m,
                s.n, s.k, r.tflops, r.correct ? "true" : "false", i + 1 < std::size(shapes) ? "," : "");
  }
  std::printf("  ],\n  \"all_correct\": %s\n}\n", all_correct && copy_correct ? "true" : "false");
  cublasDestroy(handle);
  return all_correct && copy_correct ? 0 : 1;
}
