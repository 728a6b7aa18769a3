// reshape_and_cache: quantise new K or V vectors (fp16, fp8 e4m3 with the cache's scale, or
// group-quantised) and write them into a paged cache, one thread per (token, head, group) — writes are one token per sequence per decode step, so simplicity wins here.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/kv_cuda.h"

namespace memtwin::kernels::cuda {
namespace {

__global__ void write_kernel(const float* __restrict__ values,         // [tokens, kv_heads, head_dim]
                             const std::int64_t* __restrict__ slots,   // [tokens]
                             std::uint8_t* __restrict__ cache,         // [num_blocks, block_size, kv_heads, vector_bytes]
                             int tokens, int kv_heads, int head_dim, int block_size, int bits, int group,
                             std::size_t vector_bytes, float fp8_scale) {
  const bool per_element = bits == 16 || fp8_scale > 0;  // fp16 and fp8: one "group" per element
  const int groups = per_element ? head_dim : head_dim / group;
  const long index = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (index >= static_cast<long>(tokens) * kv_heads * groups) return;
  const int g = index % groups;
  const int h = (index / groups) % kv_heads;
  const int t = index / (static_cast<long>(groups) * kv_heads);
  const std::int64_t slot = slots[t];
  if (slot < 0) return;
  const std::size_t token_stride = static_cast<std::size_t>(kv_heads) * vector_bytes;
  std::uint8_t* vec = cache + (slot / block_size) * token_stride * block_size + (slot % block_size) * token_stride +
                      h * vector_bytes;
  const float* x = values + (static_cast<std::size_t>(t) * kv_heads + h) * head_dim;
  if (bits == 16) {
    reinterpret_cast<__half*>(vec)[g] = __float2half_rn(x[g]);
    return;
  }
  if (fp8_scale > 0) {  // e4m3 of x / scale, round to nearest even, saturating at +-448 like the CPU kernel
    vec[g] = static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(__fdiv_rn(x[g], fp8_scale), __NV_SATFINITE, __NV_E4M3));
    return;
  }
  const float* xs = x + g * group;
  float lo = xs[0], hi = xs[0];
  for (int i = 1; i < group; ++i) {
    lo = fminf(lo, xs[i]);
    hi = fmaxf(hi, xs[i]);
  }
  const int levels = (1 << bits) - 1;
  const __half scale_h = __float2half_rn((hi - lo) / levels);
  const __half zero_h = __float2half_rn(lo);
  const float scale = __half2float(scale_h), zero = __half2float(zero_h);
  const int code_bytes = group * bits / 8;
  std::uint8_t* base = vec + static_cast<std::size_t>(g) * (code_bytes + 4);
  for (int b = 0; b < code_bytes; ++b) {
    unsigned packed = 0;
    for (int k = 0; k < 8 / bits; ++k) {
      const int i = b * (8 / bits) + k;
      int code = scale > 0 ? __float2int_rn((xs[i] - zero) / scale) : 0;
      code = min(max(code, 0), levels);
      packed |= static_cast<unsigned>(code) << (k * bits);
    }
    base[b] = static_cast<std::uint8_t>(packed);
  }
  reinterpret_cast<__half*>(base + code_bytes)[0] = scale_h;
  reinterpret_cast<__half*>(base + code_bytes)[1] = zero_h;
}

}  // namespace

void write_paged(const float* values, const std::int64_t* slot_mapping, int tokens, const PagedShape& shape,
                 std::uint8_t* cache) {
  shape.format.validate();
  if (tokens <= 0) return;
  const KvFormat& f = shape.format;
  const int groups = f.quantized() ? f.groups() : f.head_dim;
  const float fp8_scale = f.element == KvElement::fp8 ? f.fp8_scale : 0.f;
  const long threads = static_cast<long>(tokens) * shape.kv_heads * groups;
  write_kernel<<<static_cast<unsigned>((threads + 255) / 256), 256>>>(values, slot_mapping, cache, tokens, shape.kv_heads,
                                                                       f.head_dim, shape.block_size, f.bits(), f.group,
                                                                       f.vector_bytes(), fp8_scale);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("write_paged kernel launch: ") + cudaGetErrorString(e));
}

}  // namespace memtwin::kernels::cuda
