#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/decode_attention_simd.h"
#include "kernels/cpu/quantize_simd.h"
#include "kernels/cpu/round_query.h"
#include "kernels/kv_kernels.h"

namespace memtwin::kernels {

void quantize_vector(const float* x, const KvFormat& f, std::uint8_t* out, bool allow_simd) {
  static const bool simd_available = simd::avx2_supported();
  if (allow_simd && simd_available) {
    if (f.quantized() && simd::quantize_groups_avx2(x, f, out)) return;
    if (f.element == KvElement::fp8 && simd::quantize_fp8_avx2(x, f, out)) return;
    if (f.element == KvElement::fp16 && simd::quantize_fp16_avx2(x, f, out)) return;
  }
  if (f.element == KvElement::fp8) {
    for (int i = 0; i < f.head_dim; ++i) out[i] = float_to_e4m3(x[i] / f.fp8_scale);
    return;
  }
  if (!f.quantized()) {
    for (int i = 0; i < f.head_dim; ++i) {
      const std::uint16_t h = float_to_half(x[i]);
      std::memcpy(out + 2 * i, &h, 2);
    }
    return;
  }
  const int bits = f.bits();
  const int levels = (1 << bits) - 1;
  for (int g = 0; g < f.groups(); ++g) {
    const float* xs = x + g * f.group;
    std::uint8_t* base = out + static_cast<std::size_t>(g) * f.group_bytes();
    float lo = xs[0], hi = xs[0];
    for (int i = 1; i < f.group; ++i) {
      lo = std::min(lo, xs[i]);
      hi = std::max(hi, xs[i]);
    }
    // Store scale and zero point in fp16 first, and quantise against the stored values, so that
    // dequantisation (which only sees fp16) reproduces the rounding the codes were chosen for.
    const std::uint16_t scale_h = float_to_half((hi - lo) / levels);
    const std::uint16_t zero_h = float_to_half(lo);
    const float scale = half_to_float(scale_h);
    const float zero = half_to_float(zero_h);
    std::memset(base, 0, f.code_bytes_per_group());
    for (int i = 0; i < f.group; ++i) {
      int code = scale > 0 ? static_cast<int>(std::lround((xs[i] - zero) / scale)) : 0;
      code = std::clamp(code, 0, levels);
      const int bit = i * bits;
      base[bit / 8] |= static_cast<std::uint8_t>(code << (bit % 8));
    }
    std::memcpy(base + f.code_bytes_per_group(), &scale_h, 2);
    std::memcpy(base + f.code_bytes_per_group() + 2, &zero_h, 2);
  }
}

void dequantize_vector(const std::uint8_t* in, const KvFormat& f, float* out) {
  if (f.element == KvElement::fp8) {
    for (int i = 0; i < f.head_dim; ++i) out[i] = e4m3_to_float(in[i]) * f.fp8_scale;
    return;
  }
  if (!f.quantized()) {
    for (int i = 0; i < f.head_dim; ++i) {
      std::uint16_t h;
      std::memcpy(&h, in + 2 * i, 2);
      out[i] = half_to_float(h);
    }
    return;
  }
  const int bits = f.bits();
  const int mask = (1 << bits) - 1;
  for (int g = 0; g < f.groups(); ++g) {
    const std::uint8_t* base = in + static_cast<std::size_t>(g) * f.group_bytes();
    std::uint16_t scale_h, zero_h;
    std::memcpy(&scale_h, base + f.code_bytes_per_group(), 2);
    std::memcpy(&zero_h, base + f.code_bytes_per_group() + 2, 2);
    const float scale = half_to_float(scale_h), zero = half_to_float(zero_h);
    for (int i = 0; i < f.group; ++i) {
      const int bit = i * bits;
      const int code = (base[bit / 8] >> (bit % 8)) & mask;
      out[g * f.group + i] = code * scale + zero;
    }
  }
}

void write_paged(const float* values, const std::int64_t* slot_mapping, int tokens, const PagedShape& shape,
                 std::uint8_t* cache) {
  shape.format.validate();
  for (int t = 0; t < tokens; ++t) {  // checked before the parallel loop: no throwing inside it
    if (slot_mapping[t] >= static_cast<std::int64_t>(shape.num_blocks) * shape.block_size) {
      throw std::invalid_argument("slot_mapping points past the cache's blocks");
    }
  }
  // A prefill's tokens on both cores; a decode step's few are not worth waking the threads for.
  const bool parallel = static_cast<long>(tokens) * shape.kv_heads >= 2048;
#pragma omp parallel for schedule(static) if (parallel)
  for (int t = 0; t < tokens; ++t) {
    const std::int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    const int block = static_cast<int>(slot / shape.block_size);
    const int offset = static_cast<int>(slot % shape.block_size);
    for (int h = 0; h < shape.kv_heads; ++h) {
      quantize_vector(values + (static_cast<std::size_t>(t) * shape.kv_heads + h) * shape.format.head_dim, shape.format,
                      cache + shape.offset(block, offset, h));
    }
  }
}

void round_query_to_bytes(const float* q, int elements, int group, std::int8_t* high, std::int8_t* low, float* scales) {
  if (group <= 0 || elements % group != 0) {
    throw std::invalid_argument("round_query_to_bytes: group " + std::to_string(group) + " must divide " +
                                std::to_string(elements) + " elements");
  }
  detail::round_query_groups(q, elements, group, high, low, scales);
}

}  // namespace memtwin::kernels
