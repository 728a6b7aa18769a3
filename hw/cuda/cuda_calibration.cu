// `memtwin calibrate --device cuda`: one GPU's microbenchmarks, the nccl-tests way (warm-up, then
// timed windows with CUDA events, the median window's figure, and a correctness count), with the
// libraries and kernels the device's runs use:
//   * bf16 GEMMs of transformer shapes (cuBLAS, fp32 accumulate, as the training device runs
//     them) by rows, and the per-head attention products; fp32 sgemm (the serving engine's);
//   * memory-bound GEMMs of a few rows against weights cycled through 1 GiB (decode's weight
//     streaming), fp32 and bf16;
//   * device-to-device copies (read + write) and pinned host<->device copies over PCIe;
//   * the CUDA KV kernels: decode attention per format by working set, paged writes per format
//     (hw/cuda/cuda_kv_calibration.cu);
//   * the NVMe tier's file I/O (a scratch file, O_DIRECT), as the offload copies do it.
// What the context, cuBLAS and the workspaces hold before any tensor is the runtime. Written for
// the CUDA build; first run on an H200 on 2026-12-04 (docs/measured-h200-2026-12-04.md).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "hw/cuda/cuda_check.h"
#include "hw/cuda/cuda_device.h"
#include "hw/cuda/cuda_kv_calibration.h"
#include "hw/cuda/cuda_timing.cuh"
#include "hw/host/nvme_file.h"

namespace memtwin::hw {
namespace {

__global__ void fill_bf16(__nv_bfloat16* x, long count, float value) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i < count) x[i] = __float2bfloat16(value);
}
__global__ void fill_f32(float* x, long count, float value) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i < count) x[i] = value;
}

struct Buffers {
  void* a = nullptr;  // operands: A, B and C of the largest GEMM, or copy sources
  std::size_t bytes = 0;
  ~Buffers() { cudaFree(a); }
};

constexpr std::size_t kOperandBytes = std::size_t{1} << 30;

// C[m,n] = A[m,k] B[k,n] row-major in `type`, operands at the buffer's start; the first output
// element (k x 0.01 x 0.01 with the constant operands) is checked.
void gemm(cublasHandle_t blas, const Buffers& b, cudaDataType type, long m, long n, long k) {
  const std::size_t element = type == CUDA_R_32F ? 4 : 2;
  char* base = static_cast<char*>(b.a);
  const void* A = base;
  const void* B = base + m * k * element;
  void* C = base + (m * k + k * n) * element;
  const float one = 1.0f, zero = 0.0f;
  check(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &one, B, type,
                     static_cast<int>(n), A, type, static_cast<int>(k), &zero, C, type, static_cast<int>(n),
                     type == CUDA_R_32F ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

bool gemm_output_right(const Buffers& b, cudaDataType type, long m, long n, long k) {
  const std::size_t element = type == CUDA_R_32F ? 4 : 2;
  const char* c = static_cast<const char*>(b.a) + (m * k + k * n) * element;
  float value = 0;
  if (type == CUDA_R_32F) {
    check(cudaMemcpy(&value, c, 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  } else {
    __nv_bfloat16 h;
    check(cudaMemcpy(&h, c, 2, cudaMemcpyDeviceToHost), "cudaMemcpy");
    value = __bfloat162float(h);
  }
  const float expected = static_cast<float>(k) * 0.01f * 0.01f;
  return std::fabs(value - expected) <= 0.02f * expected;  // bf16 operands round 0.01
}

void fill(const Buffers& b, cudaDataType type) {
  const long count = static_cast<long>(b.bytes / (type == CUDA_R_32F ? 4 : 2));
  const unsigned blocks = static_cast<unsigned>((count + 255) / 256);
  if (type == CUDA_R_32F) fill_f32<<<blocks, 256>>>(static_cast<float*>(b.a), count, 0.01f);
  else fill_bf16<<<blocks, 256>>>(static_cast<__nv_bfloat16*>(b.a), count, 0.01f);
  check(cudaGetLastError(), "fill kernel launch");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

std::string shape_name(const char* what, long m, long n, long k) {
  return std::string(what) + " " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
}

void measure_gemms(DeviceCalibration& c, cublasHandle_t blas, Buffers& b, double min_seconds) {
  // Transformer layers of a 7-8B model: tokens x (hidden -> hidden, -> MLP, MLP -> hidden, ->
  // a vocabulary slice), from a decode batch to a training micro-batch.
  for (long m : {32L, 128L, 512L, 2048L, 8192L}) {
    std::vector<RateSample> same_rows;
    for (auto [k, n] : {std::pair<long, long>{4096, 4096}, {4096, 14336}, {14336, 4096}, {4096, 16384}}) {
      const double flops = 2.0 * m * n * k;
      fill(b, CUDA_R_16BF);  // an earlier shape's output overlaps this one's operands
      const double s = seconds_per_call([&] { gemm(blas, b, CUDA_R_16BF, m, n, k); }, min_seconds / 4);
      if (!gemm_output_right(b, CUDA_R_16BF, m, n, k)) ++c.wrong_results;
      c.gemm.push_back({shape_name("gemm bf16", m, n, k), flops, s, flops / s});
      same_rows.push_back(c.gemm.back());
    }
    c.gemm_median_by_rows.emplace_back(static_cast<int>(m), median_rate(same_rows));
  }
  for (const auto& g : c.gemm) c.gemm_best_flops = std::max(c.gemm_best_flops, g.rate);
  c.gemm_median_flops = median_rate(c.gemm);
  // Attention's per-head products (32 heads of 128) over 1K-8K tokens, as strided batches.
  for (long seq : {1024L, 4096L, 8192L}) {
    for (auto [m, n, k] : {std::tuple<long, long, long>{seq, seq, 128}, {seq, 128, seq}}) {
      long heads = 32;  // as many of a 7-8B model's 32 heads as the operands hold
      while (heads > 1 && static_cast<std::size_t>((m * k + k * n + m * n) * heads * 2) > b.bytes) heads /= 2;
      char* base = static_cast<char*>(b.a);
      const float one = 1.0f, zero = 0.0f;
      const double s = seconds_per_call(
          [&] {
            check(cublasGemmStridedBatchedEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                                             static_cast<int>(k), &one, base + m * k * heads * 2, CUDA_R_16BF,
                                             static_cast<int>(n), k * n, base, CUDA_R_16BF, static_cast<int>(k), m * k, &zero,
                                             base + (m * k + k * n) * heads * 2, CUDA_R_16BF, static_cast<int>(n), m * n,
                                             static_cast<int>(heads), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  "cublasGemmStridedBatchedEx");
          },
          min_seconds / 4);
      const double flops = 2.0 * m * n * k * heads;
      c.attention.push_back({shape_name(("attention x" + std::to_string(heads) + " heads").c_str(), m, n, k), flops, s, flops / s});
    }
  }
  c.attention_median_flops = median_rate(c.attention);
  // fp32 (no TF32): the serving engine's GEMMs.
  for (long m : {128L, 2048L}) {
    const long k = 4096, n = 4096;
    const double flops = 2.0 * m * n * k;
    fill(b, CUDA_R_32F);
    const double s = seconds_per_call([&] { gemm(blas, b, CUDA_R_32F, m, n, k); }, min_seconds / 4);
    if (!gemm_output_right(b, CUDA_R_32F, m, n, k)) ++c.wrong_results;
    c.fp32_flops = std::max(c.fp32_flops, flops / s);
  }
}

// Decode's weight streaming: a few rows against weight matrices cycled through the whole buffer,
// so that every call reads its weights from HBM.
void measure_weight_streaming(DeviceCalibration& c, cublasHandle_t blas, Buffers& b, double min_seconds) {
  for (cudaDataType type : {CUDA_R_32F, CUDA_R_16BF}) {
    fill(b, type);
    const std::size_t element = type == CUDA_R_32F ? 4 : 2;
    for (auto [k, n] : {std::pair<long, long>{4096, 4096}, {4096, 14336}, {14336, 4096}}) {
      const std::size_t matrix = static_cast<std::size_t>(k * n) * element;
      const std::size_t copies = std::max<std::size_t>(2, (b.bytes - (std::size_t{64} << 20)) / matrix);
      char* rows = static_cast<char*>(b.a) + copies * matrix;  // 8 rows of k, then 8 of n
      for (long m : {1L, 8L}) {
        std::size_t next = 0;
        const float one = 1.0f, zero = 0.0f;
        const double s = seconds_per_call(
            [&] {
              const char* weights = static_cast<const char*>(b.a) + (next++ % copies) * matrix;
              check(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                                 &one, weights, type, static_cast<int>(n), rows, type, static_cast<int>(k), &zero,
                                 rows + 8 * k * element, type, static_cast<int>(n),
                                 type == CUDA_R_32F ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    "cublasGemmEx (weight streaming)");
            },
            min_seconds / 4);
        c.weight_streaming.push_back({shape_name(type == CUDA_R_32F ? "gemm fp32" : "gemm bf16", m, n, k),
                                      static_cast<double>(matrix), s, static_cast<double>(matrix) / s});
      }
    }
  }
  c.weight_streaming_bytes_per_s = median_rate(c.weight_streaming);
}

void measure_copies(DeviceCalibration& c, Buffers& b, double min_seconds) {
  const std::size_t half = b.bytes / 2;
  char* base = static_cast<char*>(b.a);
  check(cudaMemset(base, 0x5a, half), "cudaMemset");
  const double d2d = seconds_per_call([&] { check(cudaMemcpyAsync(base + half, base, half, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync"); },
                                      min_seconds);
  c.stream_bytes_per_s = 2.0 * static_cast<double>(half) / d2d;
  unsigned char probe = 0;
  check(cudaMemcpy(&probe, base + half + half / 2, 1, cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (probe != 0x5a) ++c.wrong_results;
  const std::size_t pcie = std::size_t{256} << 20;
  void* pinned = nullptr;
  check(cudaMallocHost(&pinned, pcie), "cudaMallocHost");
  const double h2d = seconds_per_call([&] { check(cudaMemcpyAsync(base, pinned, pcie, cudaMemcpyHostToDevice), "cudaMemcpyAsync"); },
                                      min_seconds / 2);
  const double d2h = seconds_per_call([&] { check(cudaMemcpyAsync(pinned, base, pcie, cudaMemcpyDeviceToHost), "cudaMemcpyAsync"); },
                                      min_seconds / 2);
  cudaFreeHost(pinned);
  c.copy_bytes_per_s = static_cast<double>(pcie) / std::max(h2d, d2h);
}

// The NVMe tier below host memory: O_DIRECT file I/O on a scratch file, 64 MiB at a time, timed on
// the host clock (the median of five windows).
void measure_nvme(DeviceCalibration& c, double min_seconds) {
  NvmeFile file;
  const std::int64_t chunk = std::int64_t{64} << 20;
  auto rate = [&](auto&& io) {
    std::vector<double> windows;
    for (int w = 0; w < 5; ++w) {
      const auto start = std::chrono::steady_clock::now();
      long calls = 0;
      double elapsed = 0;
      do {
        io();
        ++calls;
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      } while (elapsed < min_seconds / 5);
      windows.push_back(static_cast<double>(chunk) * static_cast<double>(calls) / elapsed);
    }
    std::sort(windows.begin(), windows.end());
    return windows[windows.size() / 2];
  };
  c.nvme_write_bytes_per_s = rate([&] { file.write(chunk); });
  c.nvme_read_bytes_per_s = rate([&] { file.read(chunk); });
}

}  // namespace

DeviceCalibration calibrate_cuda(int device, double min_seconds) {
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  DeviceCalibration c;
  c.device = prop.name;
  c.method = "One GPU; CUDA events around timed windows, the median window; cuBLAS and memtwin's CUDA KV kernels.";
  c.gemm_precision = "bf16";
  c.copy_method = "pinned host<->device copies, the slower direction";
  c.runtime_method = "in use before any tensor (cudaMemGetInfo): context, cuBLAS handle and workspace";
  cublasHandle_t blas = nullptr;
  check(cublasCreate(&blas), "cublasCreate");
  {
    std::size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    c.runtime_bytes = static_cast<std::int64_t>(total - free);
  }
  {
    Buffers b;
    b.bytes = kOperandBytes;
    check(cudaMalloc(&b.a, b.bytes), "cudaMalloc (calibration operands)");
    measure_gemms(c, blas, b, min_seconds);
    measure_weight_streaming(c, blas, b, min_seconds);
    measure_copies(c, b, min_seconds);
  }
  measure_kv_kernels(c, min_seconds);
  measure_kivi_kernels(c, min_seconds);
  measure_nvme(c, min_seconds);
  cublasDestroy(blas);
  return c;
}

}  // namespace memtwin::hw
