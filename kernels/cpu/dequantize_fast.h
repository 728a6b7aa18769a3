#pragma once
// The CPU decode kernels' dequantisation of one paged vector (decode_attention.cpp, and KIVI's
// values in kivi_paged.cpp). Internal to kernels/.
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/kv_format.h"

namespace memtwin::kernels {

// The kernel's own dequantisation: the same values as dequantize_vector (a test holds them to the
// reference), written so that the compiler vectorises it.
inline void dequantize_fast(const std::uint8_t* in, const KvFormat& f, const float* halves, float* out) {
  if (f.element == KvElement::fp8) {
    static const std::vector<float> e4m3 = [] {
      std::vector<float> t(256);
      for (int v = 0; v < 256; ++v) t[v] = e4m3_to_float(static_cast<std::uint8_t>(v));
      return t;
    }();
    for (int i = 0; i < f.head_dim; ++i) out[i] = e4m3[in[i]] * f.fp8_scale;
    return;
  }
  if (!f.quantized()) {
    std::uint16_t bits[256];
    std::memcpy(bits, in, static_cast<std::size_t>(f.head_dim) * 2);
    for (int i = 0; i < f.head_dim; ++i) out[i] = halves[bits[i]];
    return;
  }
  const int code_bytes = f.code_bytes_per_group();
  for (int g = 0; g < f.groups(); ++g) {
    const std::uint8_t* base = in + static_cast<std::size_t>(g) * f.group_bytes();
    std::uint16_t params[2];
    std::memcpy(params, base + code_bytes, 4);
    const float scale = halves[params[0]], zero = halves[params[1]];
    float* o = out + g * f.group;
    switch (f.bits()) {
      case 8:
#pragma omp simd
        for (int i = 0; i < code_bytes; ++i) o[i] = base[i] * scale + zero;
        break;
      case 4:
#pragma omp simd
        for (int i = 0; i < code_bytes; ++i) {
          o[2 * i] = (base[i] & 0xf) * scale + zero;
          o[2 * i + 1] = (base[i] >> 4) * scale + zero;
        }
        break;
      default:  // 2 bits
#pragma omp simd
        for (int i = 0; i < code_bytes; ++i) {
          o[4 * i] = (base[i] & 0x3) * scale + zero;
          o[4 * i + 1] = ((base[i] >> 2) & 0x3) * scale + zero;
          o[4 * i + 2] = ((base[i] >> 4) & 0x3) * scale + zero;
          o[4 * i + 3] = (base[i] >> 6) * scale + zero;
        }
        break;
    }
  }
}

}  // namespace memtwin::kernels
