// `memtwin calibrate --device cuda`: one GPU's microbenchmarks, the nccl-tests way (warm-up, then
// timed windows with CUDA events, the median window's figure, and a correctness count), with the
// libraries and kernels the device's runs use:
//   * bf16 GEMMs of transformer shapes (cuBLAS, fp32 accumulate, as the training device runs
//     them) by rows, and the per-head attention products; fp32 sgemm (the serving engine's);
//   * memory-bound GEMMs of a few rows against weights cycled through 1 GiB (decode's weight
//     streaming), fp32 and bf16;
//   * device-to-device copies (read + write) and pinned host<->device copies over PCIe;
//   * the CUDA KV kernels: decode attention per format by working set, paged writes per format;
//   * the NVMe tier's file I/O (a scratch file, O_DIRECT), as the offload copies do it.
// What the context, cuBLAS and the workspaces hold before any tensor is the runtime. Written for
// the CUDA build; not yet run on a GPU.
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
#include "hw/host/nvme_file.h"
#include "kernels/cuda/kv_cuda.h"

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

// Seconds per call of `run` (work enqueued on the default stream): two warm-up calls, then five
// windows of at least min_seconds / 5 each timed with events; the median window.
template <class F>
double seconds_per_call(F&& run, double min_seconds) {
  run();
  run();
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> windows;
  long calls = 1;
  for (int w = 0; w < 5; ++w) {
    for (;;) {
      check(cudaEventRecord(start), "cudaEventRecord");
      for (long i = 0; i < calls; ++i) run();
      check(cudaEventRecord(stop), "cudaEventRecord");
      check(cudaEventSynchronize(stop), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      if (ms * 1e-3 >= min_seconds / 5 || calls > (1L << 24)) {
        windows.push_back(ms * 1e-3 / static_cast<double>(calls));
        break;
      }
      calls *= 2;
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(windows.begin(), windows.end());
  return windows[windows.size() / 2];
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
  fill(b, CUDA_R_16BF);
  for (long m : {32L, 128L, 512L, 2048L, 8192L}) {
    std::vector<RateSample> same_rows;
    for (auto [k, n] : {std::pair<long, long>{4096, 4096}, {4096, 14336}, {14336, 4096}, {4096, 16384}}) {
      const double flops = 2.0 * m * n * k;
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
  fill(b, CUDA_R_32F);
  for (long m : {128L, 2048L}) {
    const long k = 4096, n = 4096;
    const double flops = 2.0 * m * n * k;
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

// The CUDA KV kernels per format: decode attention over batches whose cached K and V range from
// 16 MiB to 1 GiB (8 KV heads of 128, GQA groups of 4), and a prefill's paged writes.
void measure_kv_kernels(DeviceCalibration& c, double min_seconds) {
  using kernels::KvElement;
  for (auto [element, format] : {std::pair{KvElement::fp16, "fp16"}, {KvElement::fp8, "fp8"}, {KvElement::int8, "int8"},
                                 {KvElement::int4, "int4"}, {KvElement::int2, "int2"}}) {
    constexpr int kv_heads = 8, q_heads = 32, head_dim = 128;
    kernels::PagedShape shape;
    shape.block_size = 16;
    shape.kv_heads = kv_heads;
    shape.format.element = element;
    shape.format.head_dim = head_dim;
    shape.format.group = 32;
    for (auto [seqs, context] : {std::pair{8, 1024}, {32, 4096}, {64, 16384}}) {
      const int per_seq = context / shape.block_size;
      shape.num_blocks = seqs * per_seq;
      if (2.0 * static_cast<double>(shape.bytes()) > 4e9) continue;
      std::uint8_t *k = nullptr, *v = nullptr;
      float *query = nullptr, *out = nullptr;
      std::int32_t *tables = nullptr, *lens = nullptr;
      check(cudaMalloc(&k, shape.bytes()), "cudaMalloc");
      check(cudaMalloc(&v, shape.bytes()), "cudaMalloc");
      check(cudaMemset(k, 0, shape.bytes()), "cudaMemset");
      check(cudaMemset(v, 0, shape.bytes()), "cudaMemset");
      check(cudaMalloc(&query, sizeof(float) * seqs * q_heads * head_dim), "cudaMalloc");
      check(cudaMalloc(&out, sizeof(float) * seqs * q_heads * head_dim), "cudaMalloc");
      check(cudaMemset(query, 0, sizeof(float) * seqs * q_heads * head_dim), "cudaMemset");
      std::vector<std::int32_t> host_tables(static_cast<std::size_t>(shape.num_blocks)), host_lens(static_cast<std::size_t>(seqs), context);
      for (int i = 0; i < shape.num_blocks; ++i) host_tables[static_cast<std::size_t>(i)] = i;
      check(cudaMalloc(&tables, sizeof(std::int32_t) * host_tables.size()), "cudaMalloc");
      check(cudaMalloc(&lens, sizeof(std::int32_t) * host_lens.size()), "cudaMalloc");
      check(cudaMemcpy(tables, host_tables.data(), sizeof(std::int32_t) * host_tables.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
      check(cudaMemcpy(lens, host_lens.data(), sizeof(std::int32_t) * host_lens.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
      const auto a = kernels::make_decode_args(query, k, v, tables, lens, out, seqs, q_heads, per_seq, shape);
      void* workspace = nullptr;
      check(cudaMalloc(&workspace, kernels::cuda::workspace_bytes(a, 512)), "cudaMalloc");
      const double s = seconds_per_call([&] { kernels::cuda::decode_attention(a, workspace, 512); }, min_seconds / 2);
      float first = 0;
      check(cudaMemcpy(&first, out, sizeof first, cudaMemcpyDeviceToHost), "cudaMemcpy");
      if (!std::isfinite(first)) ++c.wrong_results;
      const double elements = 2.0 * seqs * context * kv_heads * head_dim;
      c.decode_attention.push_back({format, 2.0 * static_cast<double>(shape.bytes()), s, elements / s});
      if (seqs == 8) {
        // A prefill's worth of new tokens (4096) written into the cache, K and V.
        constexpr int written = 4096;
        float* values = nullptr;
        std::int64_t* slots = nullptr;
        check(cudaMalloc(&values, sizeof(float) * written * kv_heads * head_dim), "cudaMalloc");
        check(cudaMemset(values, 0, sizeof(float) * written * kv_heads * head_dim), "cudaMemset");
        std::vector<std::int64_t> host_slots(written);
        for (int t = 0; t < written; ++t) host_slots[static_cast<std::size_t>(t)] = t * 7L % (shape.num_blocks * shape.block_size);
        check(cudaMalloc(&slots, sizeof(std::int64_t) * written), "cudaMalloc");
        check(cudaMemcpy(slots, host_slots.data(), sizeof(std::int64_t) * written, cudaMemcpyHostToDevice), "cudaMemcpy");
        const double w = seconds_per_call(
            [&] {
              kernels::cuda::write_paged(values, slots, written, shape, k);
              kernels::cuda::write_paged(values, slots, written, shape, v);
            },
            min_seconds / 2);
        const double written_elements = 2.0 * written * kv_heads * head_dim;
        c.kv_write.push_back({format, written_elements, w, written_elements / w});
        cudaFree(values);
        cudaFree(slots);
      }
      for (void* p : {static_cast<void*>(k), static_cast<void*>(v), static_cast<void*>(query), static_cast<void*>(out),
                      static_cast<void*>(tables), static_cast<void*>(lens), workspace})
        cudaFree(p);
    }
  }
}

// KIVI's CUDA kernels (kernels/cuda/kivi_paged.cu) as the host calibration measures them:
// decode attention over batches of quantised groups only ("kivi2", "kivi4") and of fp16 residual
// only ("kivi_fp16"), 8 KV heads of 128, GQA groups of 4; and the append one token per sequence
// over G steps, each sequence quantising one group from its staged residual ("kv_write.kivi*").
void measure_kivi_kernels(DeviceCalibration& c, double min_seconds) {
  constexpr int kv_heads = 8, q_heads = 32, head_dim = 128;
  kernels::KiviPagedShape shape;
  shape.block_size = 32;
  shape.kv_heads = kv_heads;
  shape.head_dim = head_dim;
  auto decode = [&](const std::string& name, int seqs, int context) {
    const int per_seq = static_cast<int>((shape.sequence_bytes(context) + shape.slice_bytes() - 1) / shape.slice_bytes());
    shape.num_blocks = seqs * per_seq;
    std::uint8_t* cache = nullptr;  // zeros: groups of scale and zero point 0, residual halves 0
    float *query = nullptr, *out = nullptr, *workspace = nullptr;
    std::int32_t *tables = nullptr, *lens = nullptr;
    check(cudaMalloc(&cache, shape.bytes()), "cudaMalloc");
    check(cudaMemset(cache, 0, shape.bytes()), "cudaMemset");
    check(cudaMalloc(&query, sizeof(float) * seqs * q_heads * head_dim), "cudaMalloc");
    check(cudaMemset(query, 0, sizeof(float) * seqs * q_heads * head_dim), "cudaMemset");
    check(cudaMalloc(&out, sizeof(float) * seqs * q_heads * head_dim), "cudaMalloc");
    std::vector<std::int32_t> host_tables(static_cast<std::size_t>(shape.num_blocks)), host_lens(static_cast<std::size_t>(seqs), context);
    for (int i = 0; i < shape.num_blocks; ++i) host_tables[static_cast<std::size_t>(i)] = i;
    check(cudaMalloc(&tables, sizeof(std::int32_t) * host_tables.size()), "cudaMalloc");
    check(cudaMalloc(&lens, sizeof(std::int32_t) * host_lens.size()), "cudaMalloc");
    check(cudaMemcpy(tables, host_tables.data(), sizeof(std::int32_t) * host_tables.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    check(cudaMemcpy(lens, host_lens.data(), sizeof(std::int32_t) * host_lens.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    const auto a = kernels::make_kivi_decode_args(query, cache, tables, lens, out, seqs, q_heads, per_seq, shape);
    check(cudaMalloc(&workspace, kernels::cuda::kivi_workspace_bytes(a, context)), "cudaMalloc");
    const double s = seconds_per_call([&] { kernels::cuda::kivi_decode_attention(a, workspace, context); }, min_seconds / 2);
    float first = 0;
    check(cudaMemcpy(&first, out, sizeof first, cudaMemcpyDeviceToHost), "cudaMemcpy");
    if (!std::isfinite(first)) ++c.wrong_results;
    const double elements = 2.0 * seqs * context * kv_heads * head_dim;
    c.decode_attention.push_back({name, static_cast<double>(seqs) * static_cast<double>(shape.sequence_bytes(context)), s, elements / s});
    for (void* p : {static_cast<void*>(cache), static_cast<void*>(query), static_cast<void*>(out), static_cast<void*>(workspace),
                    static_cast<void*>(tables), static_cast<void*>(lens)})
      cudaFree(p);
  };
  for (int bits : {2, 4}) {
    shape.bits = bits;
    shape.residual = 0;
    for (auto [seqs, context] : {std::pair{8, 1024}, {32, 4096}, {64, 16384}}) decode("kivi" + std::to_string(bits), seqs, context);
    // The append: 64 sequences whose residual is full (R + G - 1 tokens of R = 128), G steps.
    constexpr int seqs = 64;
    shape.residual = 128;
    const int context = shape.residual + shape.group;
    const int per_seq = static_cast<int>((shape.sequence_bytes(context - 1) + shape.slice_bytes() - 1) / shape.slice_bytes());
    shape.num_blocks = seqs * per_seq;
    const std::size_t staged_halves = static_cast<std::size_t>(context) * shape.residual_token_bytes() / 2;
    std::uint8_t* cache = nullptr;
    std::uint16_t* staging = nullptr;
    float* values = nullptr;
    check(cudaMalloc(&cache, shape.bytes()), "cudaMalloc");
    check(cudaMemset(cache, 0, shape.bytes()), "cudaMemset");
    check(cudaMalloc(&staging, sizeof(std::uint16_t) * staged_halves * seqs), "cudaMalloc");
    check(cudaMemset(staging, 0, sizeof(std::uint16_t) * staged_halves * seqs), "cudaMemset");
    check(cudaMalloc(&values, sizeof(float) * seqs * kv_heads * head_dim), "cudaMalloc");
    check(cudaMemset(values, 0, sizeof(float) * seqs * kv_heads * head_dim), "cudaMemset");
    std::vector<std::int32_t> host_tables(static_cast<std::size_t>(shape.num_blocks)), host_first(seqs), host_one(seqs, 1);
    std::vector<const std::uint16_t*> host_staged(seqs);
    for (int i = 0; i < shape.num_blocks; ++i) host_tables[static_cast<std::size_t>(i)] = i;
    for (int q = 0; q < seqs; ++q) host_first[static_cast<std::size_t>(q)] = q, host_staged[static_cast<std::size_t>(q)] = staging + q * staged_halves;
    std::int32_t *tables = nullptr, *first = nullptr, *one = nullptr, *held = nullptr;
    const std::uint16_t** staged = nullptr;
    check(cudaMalloc(&tables, sizeof(std::int32_t) * host_tables.size()), "cudaMalloc");
    check(cudaMalloc(&first, sizeof(std::int32_t) * seqs), "cudaMalloc");
    check(cudaMalloc(&one, sizeof(std::int32_t) * seqs), "cudaMalloc");
    check(cudaMalloc(&held, sizeof(std::int32_t) * seqs * shape.group), "cudaMalloc");
    check(cudaMalloc(&staged, sizeof(void*) * seqs), "cudaMalloc");
    std::vector<std::int32_t> host_held(static_cast<std::size_t>(seqs) * shape.group);  // step j: R + j tokens held
    for (int j = 0; j < shape.group; ++j) std::fill_n(host_held.begin() + j * seqs, seqs, shape.residual + j);
    check(cudaMemcpy(tables, host_tables.data(), sizeof(std::int32_t) * host_tables.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    check(cudaMemcpy(first, host_first.data(), sizeof(std::int32_t) * seqs, cudaMemcpyHostToDevice), "cudaMemcpy");
    check(cudaMemcpy(one, host_one.data(), sizeof(std::int32_t) * seqs, cudaMemcpyHostToDevice), "cudaMemcpy");
    check(cudaMemcpy(held, host_held.data(), sizeof(std::int32_t) * host_held.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    check(cudaMemcpy(staged, host_staged.data(), sizeof(void*) * seqs, cudaMemcpyHostToDevice), "cudaMemcpy");
    auto step = kernels::make_kivi_append_args(values, values, seqs, first, one, held, tables, per_seq, shape, cache);
    step.staged = staged;
    const double w = seconds_per_call(
        [&] {
          for (int j = 0; j < shape.group; ++j) {
            step.cached = held + j * seqs;
            kernels::cuda::kivi_append(step);
          }
        },
        min_seconds / 2);
    const double written = 2.0 * seqs * shape.group * kv_heads * head_dim;
    c.kv_write.push_back({"kivi" + std::to_string(bits), written, w, written / w});
    for (void* p : {static_cast<void*>(cache), static_cast<void*>(staging), static_cast<void*>(values), static_cast<void*>(tables),
                    static_cast<void*>(first), static_cast<void*>(one), static_cast<void*>(held), static_cast<void*>(staged)})
      cudaFree(p);
  }
  shape.residual = 16384;
  for (auto [seqs, context] : {std::pair{8, 1024}, {32, 4096}}) decode("kivi_fp16", seqs, context);
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
