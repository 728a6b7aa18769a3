// The kernel benchmark's CUDA part: decode attention on the device against its device-to-device
// copy bandwidth (memtwin_kernels_bench --device cuda).
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/cuda/kv_cuda.h"
#include "tools/bench_workloads.h"

namespace memtwin::bench {

namespace {

#define CUDA_OK(call)                                                                     \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_));             \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

template <class F>
double cuda_ms(F run, int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i) run();
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  CUDA_OK(cudaEventRecord(a));
  for (int i = 0; i < repeats; ++i) run();
  CUDA_OK(cudaEventRecord(b));
  CUDA_OK(cudaEventSynchronize(b));
  float ms = 0;
  CUDA_OK(cudaEventElapsedTime(&ms, a, b));
  return ms / repeats;
}

template <class T>
T* upload(const T* data, std::size_t count) {
  T* d = nullptr;
  CUDA_OK(cudaMalloc(&d, count * sizeof(T)));
  CUDA_OK(cudaMemcpy(d, data, count * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
template <class T>
T* upload(const std::vector<T>& v) {
  return upload(v.data(), v.size());
}
std::uint8_t* upload(const HostBuffer& b) { return upload(b.data(), b.size()); }

}  // namespace

void bench_cuda(bool quick) {
  const std::size_t copy_bytes = std::size_t{2} << 30;
  void *src, *dst;
  CUDA_OK(cudaMalloc(&src, copy_bytes));
  CUDA_OK(cudaMalloc(&dst, copy_bytes));
  const double copy_ms = cuda_ms([&] { CUDA_OK(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice)); }, 3, 10);
  const double copy = 2.0 * copy_bytes / (copy_ms * 1e-3);
  CUDA_OK(cudaFree(src));
  CUDA_OK(cudaFree(dst));
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("cuda device %s: copy bandwidth (device to device, read+write) %.1f GB/s\n", prop.name, copy / 1e9);
  std::printf("%-6s %-5s %8s %6s %12s %10s %8s %10s\n", "device", "kv", "context", "batch", "time_us", "GB/s", "of_copy",
              "vs_fp16");
  for (int context : quick ? std::vector<int>{1024, 32768} : std::vector<int>{1024, 4096, 16384, 32768, 65536, 131072}) {
    for (int batch : {1, 8, 64}) {
      double fp16_ms = 0;
      for (KvElement e : {KvElement::fp16, KvElement::fp8, KvElement::int8, KvElement::int4, KvElement::int2}) {
        KvFormat f;
        f.element = e;
        const double bytes = 2.0 * context * batch * kKvHeads * static_cast<double>(f.vector_bytes());
        if (bytes > 16e9) continue;  // host-side filling dominates past this
        Workload w = make_workload(e, context, batch);
        DecodeAttentionArgs a = w.args();
        a.query = upload(w.query);
        a.k_cache = upload(w.k);
        a.v_cache = upload(w.v);
        a.block_tables = upload(w.table);
        a.context_lens = upload(w.context_lens);
        float* out = nullptr;
        CUDA_OK(cudaMalloc(&out, w.out.size() * sizeof(float)));
        a.out = out;
        const int split = 512;
        void* ws = nullptr;
        CUDA_OK(cudaMalloc(&ws, memtwin::kernels::cuda::workspace_bytes(a, split)));
        const double ms = cuda_ms([&] { memtwin::kernels::cuda::decode_attention(a, ws, split); }, 3, 20);
        if (e == KvElement::fp16) fp16_ms = ms;
        std::printf("%-6s %-5s %8d %6d %12.1f %10.1f %7.0f%% %9.2fx\n", "cuda", element_name(e), context, batch, ms * 1e3,
                    w.kv_bytes() / (ms * 1e-3) / 1e9, 100 * w.kv_bytes() / (ms * 1e-3) / copy,
                    fp16_ms > 0 ? fp16_ms / ms : 0.0);
        for (const void* p : {static_cast<const void*>(a.query), static_cast<const void*>(a.k_cache),
                              static_cast<const void*>(a.v_cache), static_cast<const void*>(a.block_tables),
                              static_cast<const void*>(a.context_lens), static_cast<const void*>(out),
                              static_cast<const void*>(ws)}) {
          CUDA_OK(cudaFree(const_cast<void*>(p)));
        }
      }
    }
  }
}

}  // namespace memtwin::bench
