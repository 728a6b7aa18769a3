// Split-K paged decode attention over fp16, fp8 (e4m3) or group-quantised KV, dequantising on the fly.
//
// Kernel 1, grid (sequence, KV head, split), 128 threads: a warp scores several tokens at once,
// each token's head_dim spread over LanesPerToken lanes that hold 8 dimensions each (one 16-byte
// load of fp16, one 4-byte load of int4 codes). All query heads of the KV head's GQA group are
// scored from one read of K and accumulate from one read of V, so KV bytes are read once. Each
// token group runs its own online softmax over tiles of tokens (several loads in flight, no
// barriers), and the groups merge once at the end. Kernel 2 combines the splits with their
// (max, sum) statistics.
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
constexpr int kSplitMultiple = 64;
constexpr int kMaxGroup = 8;
constexpr int kDimsPerLane = 8;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// The BITS template argument of an fp8 (e4m3) cache: 8 bits per element like int8, but each
// element on its own with one scale per cache.
constexpr int kFp8 = 9;

// Where this lane's eight dimensions live inside one cached vector (constant per lane).
struct LaneSlice {
  int code_offset;   // bytes from the vector start to the lane's first code (fp16: to its first half)
  int param_offset;  // quantised: bytes to its group's (scale, zero) pair
  float fp8_factor;  // fp8: what the e4m3 bits read as a half are multiplied by (2^8 x the cache's scale)
};

template <int BITS>
__host__ __device__ inline LaneSlice lane_slice(int d0, int group, float fp8_scale) {
  if (BITS == 16) return {d0 * 2, 0, 0.f};
  if (BITS == kFp8) return {d0, 0, 256.f * fp8_scale};
  const int group_bytes = group * BITS / 8 + 4;
  const int g = d0 / group, within = d0 % group;
  return {g * group_bytes + within * BITS / 8, g * group_bytes + group * BITS / 8, 0.f};
}

// 2^23 + v as a float is exact for v < 2^23: OR-ing a code into the mantissa of 2^23 and
// subtracting 2^23 converts it exactly with full-rate instructions instead of an integer-to-float
// conversion.
__device__ __forceinline__ float code_to_float(uint32_t code) { return __uint_as_float(0x4b000000u | code) - 8388608.f; }

// One lane's eight dimensions as loaded: raw bits plus the group's constants, dequantised element
// by element where they are consumed, so a tile of tokens in flight costs few registers.
template <int BITS>
struct RawSlice;

template <>
struct RawSlice<16> {
  uint4 bits;
  __device__ __forceinline__ void load(const std::uint8_t* vec, LaneSlice s) {
    bits = *reinterpret_cast<const uint4*>(vec + s.code_offset);
  }
  __device__ __forceinline__ void clear() { bits = make_uint4(0, 0, 0, 0); }
  __device__ __forceinline__ float get(int i) const {
    const uint32_t word = i < 2 ? bits.x : i < 4 ? bits.y : i < 6 ? bits.z : bits.w;
    return __half2float(__ushort_as_half(static_cast<unsigned short>((i & 1) ? word >> 16 : word & 0xffff)));
  }
};

template <>
struct RawSlice<kFp8> {
  // Eight e4m3 bytes. Moved into a half's bits (sign to the top, exponent and mantissa shifted
  // by 7), an e4m3 value reads as itself x 2^-8, subnormals included; the factor undoes that and
  // applies the cache's scale. The only code that differs is NaN (0x7f), which writes never store.
  uint32_t lo = 0, hi = 0;
  float factor = 0;
  __device__ __forceinline__ void load(const std::uint8_t* vec, LaneSlice s) {
    const uint2 raw = *reinterpret_cast<const uint2*>(vec + s.code_offset);
    lo = raw.x;
    hi = raw.y;
    factor = s.fp8_factor;
  }
  __device__ __forceinline__ void clear() { lo = hi = 0; factor = 0; }
  __device__ __forceinline__ float get(int i) const {
    const uint32_t b = ((i < 4 ? lo : hi) >> (8 * (i & 3))) & 0xff;
    const unsigned short h = static_cast<unsigned short>(((b & 0x80u) << 8) | ((b & 0x7fu) << 7));
    return __half2float(__ushort_as_half(h)) * factor;
  }
};

template <int BITS>
struct RawSlice {
  // Codes of eight dimensions (BITS * 8 bits: one or two words) and the group's scale and zero.
  uint32_t lo = 0, hi = 0;
  float scale = 0, zero = 0;
  __device__ __forceinline__ void load(const std::uint8_t* vec, LaneSlice s) {
    const uint32_t params = *reinterpret_cast<const uint32_t*>(vec + s.param_offset);
    scale = __half2float(__ushort_as_half(static_cast<unsigned short>(params & 0xffff)));
    zero = __half2float(__ushort_as_half(static_cast<unsigned short>(params >> 16)));
    const std::uint8_t* codes = vec + s.code_offset;
    if constexpr (BITS == 8) {
      lo = *reinterpret_cast<const uint32_t*>(codes);
      hi = *reinterpret_cast<const uint32_t*>(codes + 4);
    } else if constexpr (BITS == 4) {
      lo = *reinterpret_cast<const uint32_t*>(codes);
    } else {
      lo = *reinterpret_cast<const uint16_t*>(codes);
    }
  }
  __device__ __forceinline__ void clear() { lo = hi = 0; scale = zero = 0; }
  __device__ __forceinline__ float get(int i) const {
    uint32_t code;
    if constexpr (BITS == 8) code = ((i < 4 ? lo : hi) >> (8 * (i & 3))) & 0xff;
    else code = (lo >> (BITS * i)) & ((1u << BITS) - 1);
    return code_to_float(code) * scale + zero;
  }
};

struct Geometry {
  int block_size, kv_heads, group_size, max_blocks_per_seq, q_heads, splits, split_tokens;
  int block_shift;  // block_size = 1 << block_shift (powers of two only: no division per token)
  std::size_t vector_bytes;
  float scale;
  float fp8_scale;  // fp8 caches: the cache's scale (1 otherwise)
};

template <int HD, int BITS, int GROUP>
__global__ void __launch_bounds__(kThreads, 4) partial_kernel(
    const float* __restrict__ query,            // [num_seqs, q_heads, HD]
    const std::uint8_t* __restrict__ k_cache,   // [num_blocks, block_size, kv_heads, vector_bytes]
    const std::uint8_t* __restrict__ v_cache,   // same
    const std::int32_t* __restrict__ block_tables,  // [num_seqs, max_blocks_per_seq]
    const std::int32_t* __restrict__ context_lens,  // [num_seqs]
    float* __restrict__ ws_acc,                 // [num_seqs, kv_heads, splits, kMaxGroup, HD]
    float* __restrict__ ws_stats,               // [num_seqs, kv_heads, splits, kMaxGroup, 2] = (max, sum)
    Geometry geo) {
  constexpr int kLanesPerToken = HD / kDimsPerLane;
  constexpr int kTokensPerWarp = 32 / kLanesPerToken;
  constexpr int kGroups = kWarps * kTokensPerWarp;  // token groups in the block
  constexpr int kTile = 4;                           // tokens a token group has in flight
  __shared__ float acc_s[kGroups][GROUP][HD];
  __shared__ float m_s[kGroups][GROUP];
  __shared__ float l_s[kGroups][GROUP];

  const int seq = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
  const int group = geo.q_heads / geo.kv_heads;  // <= GROUP
  const int ctx = context_lens[seq];
  const int start = split * geo.split_tokens;
  const int end = min(ctx, start + geo.split_tokens);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane / kLanesPerToken, part = lane % kLanesPerToken, d0 = part * kDimsPerLane;
  const int tg = warp * kTokensPerWarp + sub;
  const LaneSlice slice = lane_slice<BITS>(d0, geo.group_size, geo.fp8_scale);
  const int block_mask = geo.block_size - 1;

  // This lane's slice of every query head of the group, pre-scaled.
  float q[GROUP][kDimsPerLane];
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    const int h = min(g, group - 1);
#pragma unroll
    for (int j = 0; j < kDimsPerLane; ++j) {
      q[g][j] = query[(static_cast<std::size_t>(seq) * geo.q_heads + kvh * group + h) * HD + d0 + j] * geo.scale;
    }
  }
  float m[GROUP], l[GROUP], acc[GROUP][kDimsPerLane];
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    m[g] = -INFINITY;
    l[g] = 0;
#pragma unroll
    for (int j = 0; j < kDimsPerLane; ++j) acc[g][j] = 0;
  }
  const std::size_t token_stride = static_cast<std::size_t>(geo.kv_heads) * geo.vector_bytes;
  const std::size_t block_stride = token_stride * geo.block_size;
  const std::int32_t* table = block_tables + static_cast<std::size_t>(seq) * geo.max_blocks_per_seq;
  auto offset_of = [&](int t) {
    return static_cast<std::size_t>(table[t >> geo.block_shift]) * block_stride + (t & block_mask) * token_stride +
           kvh * geo.vector_bytes;
  };

  // No barriers in the main loop: each token group keeps its own online softmax over the tokens
  // it owns (a tile of kTile at a time, so that kTile K and V loads are in flight), and the
  // groups are merged once at the end.
  for (int base = start; base < end; base += kGroups * kTile) {
    bool valid[kTile];
    RawSlice<BITS> kr[kTile], vr[kTile];
    float s[kTile][GROUP];
#pragma unroll
    for (int k = 0; k < kTile; ++k) {
      const int t = base + k * kGroups + tg;
      valid[k] = t < end;
      if (valid[k]) {
        const std::size_t offset = offset_of(t);
        kr[k].load(k_cache + offset, slice);
        vr[k].load(v_cache + offset, slice);
      } else {
        kr[k].clear();
        vr[k].clear();
      }
    }
#pragma unroll
    for (int k = 0; k < kTile; ++k) {
      float dot[GROUP];
#pragma unroll
      for (int g = 0; g < GROUP; ++g) dot[g] = 0;
#pragma unroll
      for (int j = 0; j < kDimsPerLane; ++j) {
        const float kv = kr[k].get(j);
#pragma unroll
        for (int g = 0; g < GROUP; ++g) dot[g] += q[g][j] * kv;
      }
#pragma unroll
      for (int g = 0; g < GROUP; ++g) {
#pragma unroll
        for (int o = kLanesPerToken / 2; o > 0; o /= 2) dot[g] += __shfl_xor_sync(0xffffffffu, dot[g], o);
        s[k][g] = valid[k] ? dot[g] : -INFINITY;
      }
    }
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
      float tile_max = s[0][g];
#pragma unroll
      for (int k = 1; k < kTile; ++k) tile_max = fmaxf(tile_max, s[k][g]);
      const float m_new = fmaxf(m[g], tile_max);
      const float rescale = m_new == -INFINITY ? 1.f : __expf(m[g] - m_new);
      l[g] *= rescale;
#pragma unroll
      for (int j = 0; j < kDimsPerLane; ++j) acc[g][j] *= rescale;
#pragma unroll
      for (int k = 0; k < kTile; ++k) {
        s[k][g] = m_new == -INFINITY ? 0.f : __expf(s[k][g] - m_new);  // the probability, in place
        l[g] += s[k][g];
      }
      m[g] = m_new;
    }
#pragma unroll
    for (int k = 0; k < kTile; ++k) {
#pragma unroll
      for (int j = 0; j < kDimsPerLane; ++j) {
        const float vv = vr[k].get(j);
#pragma unroll
        for (int g = 0; g < GROUP; ++g) acc[g][j] += s[k][g] * vv;
      }
    }
  }

  // Merge the token groups: rescale each to the block's maximum and add.
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
#pragma unroll
    for (int j = 0; j < kDimsPerLane; ++j) acc_s[tg][g][d0 + j] = acc[g][j];
    if (part == 0) {
      m_s[tg][g] = m[g];
      l_s[tg][g] = l[g];
    }
  }
  __syncthreads();
  const std::size_t out_index = (static_cast<std::size_t>(seq) * geo.kv_heads + kvh) * geo.splits + split;
  for (int e = threadIdx.x; e < group * HD; e += kThreads) {
    const int g = e / HD, d = e % HD;
    float mx = -INFINITY;
    for (int i = 0; i < kGroups; ++i) mx = fmaxf(mx, m_s[i][g]);
    float sum = 0, norm = 0;
    if (mx != -INFINITY) {
      for (int i = 0; i < kGroups; ++i) {
        const float w = __expf(m_s[i][g] - mx);
        sum += w * acc_s[i][g][d];
        norm += w * l_s[i][g];
      }
    }
    ws_acc[(out_index * kMaxGroup + g) * HD + d] = sum;
    if (d == 0) {
      ws_stats[(out_index * kMaxGroup + g) * 2] = mx;
      ws_stats[(out_index * kMaxGroup + g) * 2 + 1] = norm;
    }
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
      if (ws_stats[(idx * kMaxGroup + g) * 2] == -INFINITY) continue;
      const float w = __expf(ws_stats[(idx * kMaxGroup + g) * 2] - m);
      den += w * ws_stats[(idx * kMaxGroup + g) * 2 + 1];
      num += w * ws_acc[(idx * kMaxGroup + g) * hd + d];
    }
    out[(static_cast<std::size_t>(seq) * geo.q_heads + h) * hd + d] = num / den;
  }
}

template <int HD, int BITS, int GROUP>
void launch_group(const DecodeAttentionArgs& a, float* acc, float* stats, const Geometry& geo) {
  dim3 grid(a.num_seqs, a.shape.kv_heads, geo.splits);
  partial_kernel<HD, BITS, GROUP><<<grid, kThreads>>>(a.query, a.k_cache, a.v_cache, a.block_tables, a.context_lens, acc,
                                                      stats, geo);
}

// The GQA group size as a template parameter (registers sized to it), rounded up to 1, 2, 4 or 8.
template <int HD, int BITS>
void launch_partial(const DecodeAttentionArgs& a, float* acc, float* stats, const Geometry& geo) {
  const int group = a.q_heads / a.shape.kv_heads;
  if (group <= 1) launch_group<HD, BITS, 1>(a, acc, stats, geo);
  else if (group <= 2) launch_group<HD, BITS, 2>(a, acc, stats, geo);
  else if (group <= 4) launch_group<HD, BITS, 4>(a, acc, stats, geo);
  else launch_group<HD, BITS, 8>(a, acc, stats, geo);
}

template <int HD>
void dispatch_bits(const DecodeAttentionArgs& a, float* acc, float* stats, const Geometry& geo) {
  switch (a.shape.format.element) {
    case KvElement::fp16: launch_partial<HD, 16>(a, acc, stats, geo); break;
    case KvElement::int8: launch_partial<HD, 8>(a, acc, stats, geo); break;
    case KvElement::int4: launch_partial<HD, 4>(a, acc, stats, geo); break;
    case KvElement::int2: launch_partial<HD, 2>(a, acc, stats, geo); break;
    case KvElement::fp8: launch_partial<HD, kFp8>(a, acc, stats, geo); break;
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
  if (split_tokens <= 0 || split_tokens % kSplitMultiple != 0) {
    throw std::invalid_argument("decode_attention (CUDA): split_tokens must be a positive multiple of " +
                                std::to_string(kSplitMultiple));
  }
  if (!workspace) throw std::invalid_argument("decode_attention (CUDA): workspace is null");
  const int bs = a.shape.block_size;
  if ((bs & (bs - 1)) != 0) throw std::invalid_argument("decode_attention (CUDA): block_size must be a power of two");
  int shift = 0;
  while ((1 << shift) < bs) ++shift;
  Geometry geo{a.shape.block_size, a.shape.kv_heads, a.shape.format.group, a.max_blocks_per_seq, a.q_heads,
               splits_for(a, split_tokens), split_tokens, shift, a.shape.format.vector_bytes(), a.scale,
               a.shape.format.fp8_scale};
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
