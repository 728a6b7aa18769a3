// KIVI's paged cache (kivi_paged.h) on the GPU: the append that quantises whole groups as they
// leave the residual, the residual's staging, and decode attention over groups and residual. The
// layout, and the quantisation's arithmetic (IEEE division, rounding half away from zero, no fused
// multiply-add), are the CPU kernels'; the [gpu] tests hold them to those.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/kv_cuda.h"

namespace memtwin::kernels::cuda {
namespace {

// The shape's sizes as the kernels use them.
struct Layout {
  int kv_heads, head_dim, bits, group, residual, code_bytes;
  std::size_t key_group_bytes, head_group_bytes, group_bytes, value_bytes, residual_token_bytes, slice_bytes;
  __device__ long long quantized(long long n) const {
    const long long eligible = n > residual ? n - residual : 0;
    return eligible / group * group;
  }
};

Layout layout_of(const KiviPagedShape& s) {
  return {s.kv_heads,          s.head_dim,        s.bits,        s.group,
          s.residual,          (s.group * s.bits + 7) / 8,
          s.key_group_bytes(), s.head_group_bytes(), s.group_bytes(), s.value_format().vector_bytes(),
          s.residual_token_bytes(), s.slice_bytes()};
}

// A sequence's byte range of one layer, through its block table.
struct Range {
  const Layout& l;
  const std::int32_t* table;
  std::uint8_t* cache;
  __device__ std::uint8_t* at(std::size_t offset) const {
    return cache + static_cast<std::size_t>(table[offset / l.slice_bytes]) * l.slice_bytes + offset % l.slice_bytes;
  }
  __device__ std::uint8_t* group(long long g) const { return at(static_cast<std::size_t>(g) * l.group_bytes); }
  __device__ __half* residual(long long quantized, long long j) const {
    return reinterpret_cast<__half*>(
        at(static_cast<std::size_t>(quantized / l.group) * l.group_bytes + static_cast<std::size_t>(j) * l.residual_token_bytes));
  }
};

// Packs `count` values into codes (lowest bits first) against an fp16 scale and zero point written
// after them, as the CPU's quantize_vector and quantize_keys_per_channel do. `x(i)` gives value i.
template <class X>
__device__ void quantize_group(X x, int count, int bits, std::uint8_t* out) {
  float lo = x(0), hi = x(0);
  for (int i = 1; i < count; ++i) {
    lo = fminf(lo, x(i));
    hi = fmaxf(hi, x(i));
  }
  const int levels = (1 << bits) - 1, code_bytes = (count * bits + 7) / 8;
  const __half scale_h = __float2half_rn(__fdiv_rn(__fsub_rn(hi, lo), static_cast<float>(levels)));
  const __half zero_h = __float2half_rn(lo);
  const float scale = __half2float(scale_h), zero = __half2float(zero_h);
  for (int byte = 0; byte < code_bytes; ++byte) {
    unsigned packed = 0;
    for (int k = 0; k < 8 / bits; ++k) {
      const int i = byte * (8 / bits) + k;
      int code = scale > 0 ? static_cast<int>(roundf(__fdiv_rn(__fsub_rn(x(i), zero), scale))) : 0;
      code = min(max(code, 0), levels);
      packed |= static_cast<unsigned>(code) << (k * bits);
    }
    out[byte] = static_cast<std::uint8_t>(packed);
  }
  reinterpret_cast<__half*>(out + code_bytes)[0] = scale_h;  // code_bytes is even for every valid (G, bits)
  reinterpret_cast<__half*>(out + code_bytes)[1] = zero_h;
}

// One block per sequence. Tokens are numbered over [old residual, new tokens]; the oldest
// (q1 - q0) become groups, the rest the new residual. A quantising sequence's old residual comes
// from its staged copy (the groups overwrite where it was).
__global__ void append_kernel(const float* __restrict__ keys, const float* __restrict__ values, const std::int32_t* first_row,
                              const std::int32_t* new_tokens, const std::int32_t* cached, const std::uint16_t* const* staged,
                              const std::int32_t* block_tables, int max_blocks, Layout l, std::uint8_t* cache) {
  const int seq = blockIdx.x;
  const long long before = cached[seq], added = new_tokens[seq];
  const long long q0 = l.quantized(before), q1 = l.quantized(before + added), r0 = before - q0, leaving = q1 - q0;
  const Range range{l, block_tables + static_cast<std::size_t>(seq) * max_blocks, cache};
  const int hd = l.head_dim, row = l.kv_heads * hd;
  const __half* old = staged && staged[seq] ? reinterpret_cast<const __half*>(staged[seq]) : nullptr;
  // Element (token t, head h, K or V, channel c) as the residual holds it.
  auto element = [&](long long t, int h, int v, int c) -> __half {
    if (t < r0) {
      const std::size_t at = static_cast<std::size_t>(h) * 2 * hd + static_cast<std::size_t>(v) * hd + c;
      return old ? old[static_cast<std::size_t>(t) * 2 * row + at] : range.residual(q0, t)[at];
    }
    const float* src = v ? values : keys;
    return __float2half_rn(src[(static_cast<std::size_t>(first_row[seq]) + (t - r0)) * row + static_cast<std::size_t>(h) * hd + c]);
  };
  for (long long g = 0; g < leaving / l.group; ++g) {
    std::uint8_t* base = range.group(q0 / l.group + g);
    const long long first = g * l.group;
    for (int i = threadIdx.x; i < l.kv_heads * hd; i += blockDim.x) {  // keys, per (head, channel)
      const int h = i / hd, c = i % hd;
      quantize_group([&](int t) { return __half2float(element(first + t, h, 0, c)); }, l.group, l.bits,
                     base + h * l.head_group_bytes + static_cast<std::size_t>(c) * (l.code_bytes + 4));
    }
    const int value_groups = hd / l.group;
    for (int i = threadIdx.x; i < l.kv_heads * l.group * value_groups; i += blockDim.x) {  // values, per (head, token, group)
      const int h = i / (l.group * value_groups), t = (i / value_groups) % l.group, vg = i % value_groups;
      quantize_group([&](int k) { return __half2float(element(first + t, h, 1, vg * l.group + k)); }, l.group, l.bits,
                     base + h * l.head_group_bytes + l.key_group_bytes + static_cast<std::size_t>(t) * l.value_bytes +
                         static_cast<std::size_t>(vg) * (l.code_bytes + 4));
    }
  }
  // The residual: without quantisation the old tokens stay where they are.
  const long long from = leaving > 0 ? leaving : r0;
  for (long long i = threadIdx.x; i < (r0 + added - from) * 2 * row; i += blockDim.x) {
    const long long t = from + i / (2 * row);
    const int e = static_cast<int>(i % (2 * row)), h = e / (2 * hd), v = (e / hd) % 2, c = e % hd;
    range.residual(q1, t - leaving)[e] = element(t, h, v, c);
  }
}

__global__ void stage_kernel(const std::uint8_t* cache, const std::int32_t* table, long long quantized, long long tokens, Layout l,
                             std::uint16_t* out) {
  const Range range{l, table, const_cast<std::uint8_t*>(cache)};
  const long long halves = static_cast<long long>(l.residual_token_bytes / 2);
  const long long index = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (index >= tokens * halves) return;
  out[index] = reinterpret_cast<const std::uint16_t*>(range.residual(quantized, index / halves))[index % halves];
}

// Block-wide reduction of one value per thread (blockDim.x a multiple of 32, at most 1024).
template <class Op>
__device__ float block_reduce(float v, Op op, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float r = scratch[0];
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) r = op(r, scratch[w]);
  __syncthreads();
  return r;
}

// One block per (sequence, KV head): its GQA group's scores into the workspace (a key group's
// from its codes, q.k = sum_c (q_c s_c) code + sum_c q_c z_c; the residual's from its halves),
// the softmax, then one thread per channel over the values.
__global__ void decode_kernel(const float* __restrict__ query, const std::uint8_t* cache, const std::int32_t* block_tables,
                              const std::int32_t* context_lens, float* out, int q_heads, int max_blocks, float scale, Layout l,
                              float* workspace, int max_context) {
  extern __shared__ float shared[];  // the group's queries [gqa, head_dim], then 32 floats of scratch
  const int gqa = q_heads / l.kv_heads, hd = l.head_dim;
  const int seq = blockIdx.x / l.kv_heads, kvh = blockIdx.x % l.kv_heads;
  const long long n = context_lens[seq], q = l.quantized(n);
  const Range range{l, block_tables + static_cast<std::size_t>(seq) * max_blocks, const_cast<std::uint8_t*>(cache)};
  float* queries = shared;
  float* scratch = shared + gqa * hd;
  const float* qsrc = query + (static_cast<std::size_t>(seq) * q_heads + static_cast<std::size_t>(kvh) * gqa) * hd;
  for (int i = threadIdx.x; i < gqa * hd; i += blockDim.x) queries[i] = qsrc[i];
  __syncthreads();
  float* scores = workspace + (static_cast<std::size_t>(seq) * q_heads + static_cast<std::size_t>(kvh) * gqa) * max_context;
  const int mask = (1 << l.bits) - 1;
  for (long long i = threadIdx.x; i < q * gqa; i += blockDim.x) {  // (token, row) in the groups
    const long long t = i / gqa;
    const int r = static_cast<int>(i % gqa), k = static_cast<int>(t % l.group);
    const std::uint8_t* keys = range.group(t / l.group) + static_cast<std::size_t>(kvh) * l.head_group_bytes;
    float dot = 0;
    for (int c = 0; c < hd; ++c) {
      const std::uint8_t* channel = keys + static_cast<std::size_t>(c) * (l.code_bytes + 4);
      const float s = __half2float(reinterpret_cast<const __half*>(channel + l.code_bytes)[0]);
      const float z = __half2float(reinterpret_cast<const __half*>(channel + l.code_bytes)[1]);
      const int code = (channel[k * l.bits / 8] >> (k * l.bits % 8)) & mask;
      dot += queries[r * hd + c] * (code * s + z);
    }
    scores[static_cast<std::size_t>(r) * max_context + t] = dot * scale;
  }
  for (long long i = threadIdx.x; i < (n - q) * gqa; i += blockDim.x) {  // (token, row) in the residual
    const long long j = i / gqa;
    const int r = static_cast<int>(i % gqa);
    const __half* k = range.residual(q, j) + static_cast<std::size_t>(kvh) * 2 * hd;
    float dot = 0;
    for (int c = 0; c < hd; ++c) dot += queries[r * hd + c] * __half2float(k[c]);
    scores[static_cast<std::size_t>(r) * max_context + q + j] = dot * scale;
  }
  __syncthreads();
  float* denominators = scratch + 32 - 8;  // after the reduction's 24 at most (768 threads)
  for (int r = 0; r < gqa; ++r) {
    float* sr = scores + static_cast<std::size_t>(r) * max_context;
    float m = -INFINITY;
    for (long long t = threadIdx.x; t < n; t += blockDim.x) m = fmaxf(m, sr[t]);
    m = block_reduce(m, [](float a, float b) { return fmaxf(a, b); }, scratch);
    float sum = 0;
    for (long long t = threadIdx.x; t < n; t += blockDim.x) sum += (sr[t] = __expf(sr[t] - m));
    sum = block_reduce(sum, [](float a, float b) { return a + b; }, scratch);
    if (threadIdx.x == 0) denominators[r] = sum;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < hd; c += blockDim.x) {
    float acc[8] = {};
    const int vg = c / l.group, k = c % l.group;
    for (long long t = 0; t < q; ++t) {
      const std::uint8_t* base = range.group(t / l.group) + static_cast<std::size_t>(kvh) * l.head_group_bytes + l.key_group_bytes +
                                 static_cast<std::size_t>(t % l.group) * l.value_bytes + static_cast<std::size_t>(vg) * (l.code_bytes + 4);
      const float s = __half2float(reinterpret_cast<const __half*>(base + l.code_bytes)[0]);
      const float z = __half2float(reinterpret_cast<const __half*>(base + l.code_bytes)[1]);
      const float v = ((base[k * l.bits / 8] >> (k * l.bits % 8)) & mask) * s + z;
      for (int r = 0; r < gqa; ++r) acc[r] += scores[static_cast<std::size_t>(r) * max_context + t] * v;
    }
    for (long long j = 0; j < n - q; ++j) {
      const float v = __half2float(range.residual(q, j)[static_cast<std::size_t>(kvh) * 2 * hd + hd + c]);
      for (int r = 0; r < gqa; ++r) acc[r] += scores[static_cast<std::size_t>(r) * max_context + q + j] * v;
    }
    float* o = out + (static_cast<std::size_t>(seq) * q_heads + static_cast<std::size_t>(kvh) * gqa) * hd;
    for (int r = 0; r < gqa; ++r) o[r * hd + c] = acc[r] / denominators[r];
  }
}

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + " kernel launch: " + cudaGetErrorString(e));
}

constexpr int kThreads = 256;

}  // namespace

void kivi_append(const KiviAppendArgs& a) {
  a.shape.validate();
  if (!a.keys || !a.values || !a.first_row || !a.new_tokens || !a.cached || !a.block_tables || !a.cache) {
    throw std::invalid_argument("kivi_append (CUDA): a pointer is null");
  }
  if (a.num_seqs <= 0) return;
  append_kernel<<<a.num_seqs, kThreads>>>(a.keys, a.values, a.first_row, a.new_tokens, a.cached, a.staged, a.block_tables,
                                          a.max_blocks_per_seq, layout_of(a.shape), a.cache);
  check_launch("kivi_append");
}

void kivi_stage_residual(const std::uint8_t* cache, const std::int32_t* block_table, std::int64_t tokens, const KiviPagedShape& shape,
                         std::uint16_t* out) {
  shape.validate();
  const std::int64_t quantized = shape.quantized_tokens(tokens);
  const long long halves = (tokens - quantized) * static_cast<long long>(shape.residual_token_bytes() / 2);
  if (halves <= 0) return;
  stage_kernel<<<static_cast<unsigned>((halves + kThreads - 1) / kThreads), kThreads>>>(cache, block_table, quantized, tokens - quantized,
                                                                                       layout_of(shape), out);
  check_launch("kivi_stage_residual");
}

std::size_t kivi_workspace_bytes(const KiviDecodeArgs& a, int max_context) {
  return static_cast<std::size_t>(a.num_seqs) * a.q_heads * static_cast<std::size_t>(max_context) * sizeof(float);
}

void kivi_decode_attention(const KiviDecodeArgs& a, float* workspace, int max_context) {
  a.shape.validate();
  if (!a.query || !a.cache || !a.block_tables || !a.context_lens || !a.out || !workspace) {
    throw std::invalid_argument("kivi_decode_attention (CUDA): a pointer is null");
  }
  if (a.num_seqs <= 0 || a.q_heads % a.shape.kv_heads != 0 || a.q_heads / a.shape.kv_heads > 8) {
    throw std::invalid_argument("kivi_decode_attention (CUDA): q_heads must be a multiple of kv_heads, at most 8 per KV head");
  }
  if (max_context <= 0) throw std::invalid_argument("kivi_decode_attention (CUDA): max_context must be positive");
  const std::size_t shared = (static_cast<std::size_t>(a.q_heads / a.shape.kv_heads) * a.shape.head_dim + 32) * sizeof(float);
  decode_kernel<<<a.num_seqs * a.shape.kv_heads, kThreads, shared>>>(a.query, a.cache, a.block_tables, a.context_lens, a.out,
                                                                     a.q_heads, a.max_blocks_per_seq, a.scale, layout_of(a.shape),
                                                                     workspace, max_context);
  check_launch("kivi_decode_attention");
}

}  // namespace memtwin::kernels::cuda
