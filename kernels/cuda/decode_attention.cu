// Split-K paged decode attention over fp16 or group-quantised KV, dequantising on the fly.
//
// Kernel 1, grid (sequence, KV head, split), 128 threads: a warp scores several tokens at once,
// each token's head_dim spread over LanesPerToken lanes that hold 8 dimensions each (one 16-byte
// load of fp16, one 4-byte load of int4 codes). All query heads of the KV head's GQA group are
// scored from one read of K and accumulate from one read of V, so KV bytes are read once. Chunks of
// kChunk tokens go through shared memory with an online softmax. Kernel 2 combines the splits with
// their (max, sum) statistics.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/kv_cuda.h"

namespace memtwin::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kChunk = 128;
constexpr int kMaxGroup = 8;
constexpr int kDimsPerLane = 8;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Eight consecutive dimensions [d0, d0 + 8) of one cached vector, dequantised.
template <int BITS>
__device__ __forceinline__ void load8(const std::uint8_t* vec, int d0, int group, float out[8]) {
  if constexpr (BITS == 16) {
    const uint4 raw = *reinterpret_cast<const uint4*>(vec + d0 * 2);
    const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(h[i]);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  } else {
    const int group_bytes = group * BITS / 8 + 4;
    const int g = d0 / group, within = d0 % group;
    const std::uint8_t* base = vec + g * group_bytes;
    const uint32_t params = *reinterpret_cast<const uint32_t*>(base + group * BITS / 8);
    const float scale = __half2float(__ushort_as_half(static_cast<unsigned short>(params & 0xffff)));
    const float zero = __half2float(__ushort_as_half(static_cast<unsigned short>(params >> 16)));
    const std::uint8_t* codes = base + within * BITS / 8;
    if constexpr (BITS == 4) {
      const uint32_t c = *reinterpret_cast<const uint32_t*>(codes);
#pragma unroll
      for (int i = 0; i < 8; ++i) out[i] = static_cast<float>((c >> (4 * i)) & 0xf) * scale + zero;
    } else if constexpr (BITS == 8) {
      const uint32_t lo = *reinterpret_cast<const uint32_t*>(codes);
      const uint32_t hi = *reinterpret_cast<const uint32_t*>(codes + 4);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        out[i] = static_cast<float>((lo >> (8 * i)) & 0xff) * scale + zero;
        out[4 + i] = static_cast<float>((hi >> (8 * i)) & 0xff) * scale + zero;
      }
    } else {  // 2 bits
      const uint32_t c = *reinterpret_cast<const uint16_t*>(codes);
#pragma unroll
      for (int i = 0; i < 8; ++i) out[i] = static_cast<float>((c >> (2 * i)) & 0x3) * scale + zero;
    }
  }
}

struct Geometry {
  int block_size, kv_heads, group_size, max_blocks_per_seq, q_heads, splits, split_tokens;
  std::size_t vector_bytes;
  float scale;
};

template <int HD, int BITS>
__global__ void __launch_bounds__(kThreads) partial_kernel(
    const float* __restrict__ query,            // [num_seqs, q_heads, HD]
    const std::uint8_t* __restrict__ k_cache,   // [num_blocks, block_size, kv_heads, vector_bytes]
    const std::uint8_t* __restrict__ v_cache,   // same
    const std::int32_t* __restrict__ block_tables,  // [num_seqs, max_blocks_per_seq]
    const std::int32_t* __restrict__ context_lens,  // [num_seqs]
    float* __restrict__ ws_acc,                 // [num_seqs, kv_heads, splits, group, HD]
    float* __restrict__ ws_stats,               // [num_seqs, kv_heads, splits, group, 2] = (max, sum)
    Geometry geo) {
  constexpr int kLanesPerToken = HD / kDimsPerLane;
  constexpr int kTokensPerWarp = 32 / kLanesPerToken;
  constexpr int kSlots = kWarps * kTokensPerWarp;
  __shared__ float q_s[kMaxGroup][HD];
  __shared__ float scores[kMaxGroup][kChunk];
  __shared__ float reduce[kMaxGroup][kWarps];
  __shared__ float acc_s[kSlots * kMaxGroup * HD / (kSlots > 8 ? 2 : 1)];  // see the reduction below

  const int seq = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
  const int group = geo.q_heads / geo.kv_heads;
  const int ctx = context_lens[seq];
  const int start = split * geo.split_tokens;
  const int end = min(ctx, start + geo.split_tokens);
  const std::size_t out_index = (static_cast<std::size_t>(seq) * geo.kv_heads + kvh) * geo.splits + split;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane / kLanesPerToken, part = lane % kLanesPerToken, d0 = part * kDimsPerLane;

  for (int i = threadIdx.x; i < group * HD; i += kThreads) {
    const int g = i / HD, d = i % HD;
    q_s[g][d] = query[(static_cast<std::size_t>(seq) * geo.q_heads + kvh * group + g) * HD + d] * geo.scale;
  }
  float m_run[kMaxGroup], l_run[kMaxGroup], acc[kMaxGroup][kDimsPerLane];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    m_run[g] = -INFINITY;
    l_run[g] = 0;
#pragma unroll
    for (int j = 0; j < kDimsPerLane; ++j) acc[g][j] = 0;
  }
  __syncthreads();
  const std::size_t token_stride = static_cast<std::size_t>(geo.kv_heads) * geo.vector_bytes;
  const std::size_t block_stride = token_stride * geo.block_size;
  auto vector_at = [&](const std::uint8_t* cache, int t) {
    const int block = block_tables[static_cast<std::size_t>(seq) * geo.max_blocks_per_seq + t / geo.block_size];
    return cache + block * block_stride + (t % geo.block_size) * token_stride + kvh * geo.vector_bytes;
  };

  for (int chunk = start; chunk < end; chunk += kChunk) {
    const int n = min(kChunk, end - chunk);
    // Scores of the chunk's tokens for every query head of the group.
    for (int base = warp * kTokensPerWarp; base < n; base += kSlots) {
      const int i = base + sub;
      const bool valid = i < n;
      float k[kDimsPerLane];
      if (valid) {
        load8<BITS>(vector_at(k_cache, chunk + i), d0, geo.group_size, k);
      } else {
#pragma unroll
        for (int j = 0; j < kDimsPerLane; ++j) k[j] = 0;
      }
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        if (g >= group) break;
        float dot = 0;
#pragma unroll
        for (int j = 0; j < kDimsPerLane; ++j) dot += q_s[g][d0 + j] * k[j];
#pragma unroll
        for (int offset = kLanesPerToken / 2; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
        if (valid && part == 0) scores[g][i] = dot;
      }
    }
    __syncthreads();
    // Online softmax over the chunk: block-wide max, then exponentials and their sum.
    for (int g = 0; g < group; ++g) {
      float m = -INFINITY;
      for (int i = threadIdx.x; i < n; i += kThreads) m = fmaxf(m, scores[g][i]);
      for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
      if (lane == 0) reduce[g][warp] = m;
    }
    __syncthreads();
    float m_new[kMaxGroup];
    for (int g = 0; g < group; ++g) {
      float m = reduce[g][0];
      for (int w = 1; w < kWarps; ++w) m = fmaxf(m, reduce[g][w]);
      m_new[g] = fmaxf(m_run[g], m);
    }
    __syncthreads();
    for (int g = 0; g < group; ++g) {
      float s = 0;
      for (int i = threadIdx.x; i < n; i += kThreads) {
        const float p = __expf(scores[g][i] - m_new[g]);
        scores[g][i] = p;
        s += p;
      }
      for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
      if (lane == 0) reduce[g][warp] = s;
    }
    __syncthreads();
    for (int g = 0; g < group; ++g) {
      float s = 0;
      for (int w = 0; w < kWarps; ++w) s += reduce[g][w];
      const float rescale = __expf(m_run[g] - m_new[g]);
      l_run[g] = l_run[g] * rescale + s;
      m_run[g] = m_new[g];
#pragma unroll
      for (int j = 0; j < kDimsPerLane; ++j) acc[g][j] *= rescale;
    }
    // Weighted sum of the chunk's V vectors.
    for (int base = warp * kTokensPerWarp; base < n; base += kSlots) {
      const int i = base + sub;
      if (i >= n) continue;
      float v[kDimsPerLane];
      load8<BITS>(vector_at(v_cache, chunk + i), d0, geo.group_size, v);
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        if (g >= group) break;
        const float p = scores[g][i];
#pragma unroll
        for (int j = 0; j < kDimsPerLane; ++j) acc[g][j] += p * v[j];
      }
    }
    __syncthreads();  // the next chunk overwrites the scores
  }

  // Sum the accumulators of all token slots (warps and sub-warp token groups), half the slots
  // at a time when they would not fit in shared memory at once.
  constexpr int kSlotsAtOnce = kSlots > 8 ? kSlots / 2 : kSlots;
  const int slot = warp * kTokensPerWarp + sub;
  float* out_acc = ws_acc + out_index * kMaxGroup * HD;
  for (int round = 0; round < kSlots / kSlotsAtOnce; ++round) {
    const int local = slot - round * kSlotsAtOnce;
    if (local >= 0 && local < kSlotsAtOnce) {
      for (int g = 0; g < group; ++g)
#pragma unroll
        for (int j = 0; j < kDimsPerLane; ++j) acc_s[(local * kMaxGroup + g) * HD + d0 + j] = acc[g][j];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < group * HD; e += kThreads) {
      float sum = 0;
      for (int s = 0; s < kSlotsAtOnce; ++s) sum += acc_s[s * kMaxGroup * HD + e];
      out_acc[e] = (round == 0 ? 0.f : out_acc[e]) + sum;
    }
    __syncthreads();
  }
  if (threadIdx.x < group) {
    ws_stats[(out_index * kMaxGroup + threadIdx.x) * 2] = m_run[threadIdx.x];
    ws_stats[(out_index * kMaxGroup + threadIdx.x) * 2 + 1] = l_run[threadIdx.x];
  }
}

// Kernel 2: one block per (sequence, query head), one thread per dimension.
__global__ void combine_kernel(const float* __restrict__ ws_acc, const float* __restrict__ ws_stats,
                               const std::int32_t* __restrict__ context_lens, float* __restrict__ out,  // [num_seqs, q_heads, hd]
                               int hd, Geometry geo) {
  const int seq = blockIdx.x, h = blockIdx.y;
  const int group = geo.q_heads / geo.kv_heads, kvh = h / group, g = h % group;
  const int used = (context_lens[seq] + geo.split_tokens - 1) / geo.split_tokens;
  float m = -INFINITY;
  for (int s = 0; s < used; ++s) {
    const std::size_t idx = (static_cast<std::size_t>(seq) * geo.kv_heads + kvh) * geo.splits + s;
    m = fmaxf(m, ws_stats[(idx * kMaxGroup + g) * 2]);
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float num = 0, den = 0;
    for (int s = 0; s < used; ++s) {
      const std::size_t idx = (static_cast<std::size_t>(seq) * geo.kv_heads + kvh) * geo.splits + s;
      const float w = __expf(ws_stats[(idx * kMaxGroup + g) * 2] - m);
      den += w * ws_stats[(idx * kMaxGroup + g) * 2 + 1];
      num += w * ws_acc[(idx * kMaxGroup + g) * hd + d];
    }
    out[(static_cast<std::size_t>(seq) * geo.q_heads + h) * hd + d] = num / den;
  }
}

template <int HD, int BITS>
void launch_partial(const DecodeAttentionArgs& a, float* acc, float* stats, const Geometry& geo) {
  dim3 grid(a.num_seqs, a.shape.kv_heads, geo.splits);
  partial_kernel<HD, BITS><<<grid, kThreads>>>(a.query, a.k_cache, a.v_cache, a.block_tables, a.context_lens, acc, stats, geo);
}

template <int HD>
void dispatch_bits(const DecodeAttentionArgs& a, float* acc, float* stats, const Geometry& geo) {
  switch (a.shape.format.element) {
    case KvElement::fp16: launch_partial<HD, 16>(a, acc, stats, geo); break;
    case KvElement::int8: launch_partial<HD, 8>(a, acc, stats, geo); break;
    case KvElement::int4: launch_partial<HD, 4>(a, acc, stats, geo); break;
    case KvElement::int2: launch_partial<HD, 2>(a, acc, stats, geo); break;
  }
}

int splits_for(const DecodeAttentionArgs& a, int split_tokens) {
  return (a.max_blocks_per_seq * a.shape.block_size + split_tokens - 1) / split_tokens;
}

}  // namespace

bool device_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

std::size_t workspace_bytes(const DecodeAttentionArgs& a, int split_tokens) {
  const std::size_t units = static_cast<std::size_t>(a.num_seqs) * a.shape.kv_heads * splits_for(a, split_tokens) * kMaxGroup;
  return units * (a.shape.format.head_dim + 2) * sizeof(float);
}

void decode_attention(const DecodeAttentionArgs& a, void* workspace, int split_tokens) {
  validate(a);
  if (a.shape.format.quantized() && a.shape.format.group % kDimsPerLane != 0) {
    throw std::invalid_argument("decode_attention (CUDA): the quantisation group must be a multiple of 8");
  }
  if (split_tokens <= 0 || split_tokens % kChunk != 0) {
    throw std::invalid_argument("decode_attention (CUDA): split_tokens must be a positive multiple of " + std::to_string(kChunk));
  }
  if (!workspace) throw std::invalid_argument("decode_attention (CUDA): workspace is null");
  Geometry geo{a.shape.block_size, a.shape.kv_heads, a.shape.format.group, a.max_blocks_per_seq, a.q_heads,
               splits_for(a, split_tokens), split_tokens, a.shape.format.vector_bytes(), a.scale};
  const int hd = a.shape.format.head_dim;
  const std::size_t units = static_cast<std::size_t>(a.num_seqs) * a.shape.kv_heads * geo.splits * kMaxGroup;
  float* acc = static_cast<float*>(workspace);
  float* stats = acc + units * hd;
  switch (hd) {
    case 64: dispatch_bits<64>(a, acc, stats, geo); break;
    case 128: dispatch_bits<128>(a, acc, stats, geo); break;
    case 256: dispatch_bits<256>(a, acc, stats, geo); break;
  }
  check(cudaGetLastError(), "decode_attention partial kernel launch");
  combine_kernel<<<dim3(a.num_seqs, a.q_heads), 128>>>(acc, stats, a.context_lens, a.out, hd, geo);
  check(cudaGetLastError(), "decode_attention combine kernel launch");
}

}  // namespace memtwin::kernels::cuda
