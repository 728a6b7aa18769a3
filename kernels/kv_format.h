#pragma once
// The paged KV-cache layouts the kernels read and write, shared by the CPU and CUDA code. Plain C++
// (no CUDA, no models/), so both implementations and the tests agree on every byte.
//
// A cache holds K and V in blocks of `block_size` tokens; a block table maps each sequence's logical
// blocks to physical ones. Per token and KV head, a vector of head_dim elements is stored as
//   fp16: head_dim halves;
//   fp8:  head_dim OCP e4m3 bytes of x / scale, one scale per cache (vLLM's k_scale / v_scale);
//   int8/int4/int2 (asymmetric group quantisation along channels, per token, as memtwin's size
//   model `GroupQuantKv` counts it): head_dim/G groups, each ceil(G*bits/8) bytes of packed codes
//   (lowest bits first) followed by a fp16 scale and a fp16 zero point (x = code * scale + zero).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace memtwin::kernels {

enum class KvElement { fp16, fp8, int8, int4, int2 };

/// The element's name, as the KV formats of calibration keys spell it (cluster.kernels.*.FORMAT).
inline const char* element_name(KvElement e) {
  switch (e) {
    case KvElement::fp16: return "fp16";
    case KvElement::fp8: return "fp8";
    case KvElement::int8: return "int8";
    case KvElement::int4: return "int4";
    case KvElement::int2: return "int2";
  }
  return "fp16";
}

struct KvFormat {
  KvElement element = KvElement::fp16;
  int head_dim = 128;
  int group = 32;  ///< quantisation group along channels (quantised formats)
  float fp8_scale = 1.0f;  ///< fp8: the cache stores e4m3(x / fp8_scale)

  [[nodiscard]] int bits() const {
    switch (element) {
      case KvElement::fp16: return 16;
      case KvElement::fp8: return 8;
      case KvElement::int8: return 8;
      case KvElement::int4: return 4;
      case KvElement::int2: return 2;
    }
    return 16;
  }
  /// Group-quantised (int8/int4/int2 codes with a scale and zero point per group); fp16 and fp8
  /// store each element on its own.
  [[nodiscard]] bool quantized() const { return element != KvElement::fp16 && element != KvElement::fp8; }
  [[nodiscard]] int groups() const { return head_dim / group; }
  [[nodiscard]] int code_bytes_per_group() const { return (group * bits() + 7) / 8; }
  /// Bytes of one group: packed codes, then fp16 scale and zero point.
  [[nodiscard]] int group_bytes() const { return code_bytes_per_group() + 4; }
  /// Bytes of one token's vector for one KV head (K or V).
  [[nodiscard]] std::size_t vector_bytes() const {
    return quantized() ? static_cast<std::size_t>(groups()) * group_bytes()
                       : static_cast<std::size_t>(head_dim) * static_cast<std::size_t>(bits() / 8);
  }
  /// Throws std::invalid_argument when the combination cannot be laid out.
  void validate() const {
    if (head_dim != 64 && head_dim != 128 && head_dim != 256) {
      throw std::invalid_argument("head_dim must be 64, 128 or 256, got " + std::to_string(head_dim));
    }
    if (element == KvElement::fp8 && !(fp8_scale > 0 && fp8_scale < 3.4e38f)) {
      throw std::invalid_argument("fp8_scale must be a positive finite number");
    }
    if (quantized() && (group <= 0 || head_dim % group != 0 || (group * bits()) % 8 != 0)) {
      throw std::invalid_argument("quantisation group " + std::to_string(group) + " must divide head_dim " +
                                  std::to_string(head_dim) + " and pack into whole bytes");
    }
  }
};

/// Geometry of one paged cache (K or V): [num_blocks, block_size, kv_heads, vector_bytes].
struct PagedShape {
  int num_blocks = 0;
  int block_size = 16;
  int kv_heads = 8;
  KvFormat format;
  [[nodiscard]] std::size_t token_stride() const { return static_cast<std::size_t>(kv_heads) * format.vector_bytes(); }
  [[nodiscard]] std::size_t block_stride() const { return token_stride() * block_size; }
  [[nodiscard]] std::size_t bytes() const { return block_stride() * num_blocks; }
  /// Offset of (physical block, slot in block, head).
  [[nodiscard]] std::size_t offset(int block, int slot, int head) const {
    return block * block_stride() + slot * token_stride() + static_cast<std::size_t>(head) * format.vector_bytes();
  }
};

/// IEEE half <-> float, bit exact and portable (round to nearest even).
float half_to_float(std::uint16_t h);
std::uint16_t float_to_half(float f);
/// Every half's float, indexed by its bits: the kernels dequantise fp16 values and scales by lookup.
const float* half_to_float_table();
/// Halves to floats with integer and float arithmetic the compiler vectorises: bit for bit
/// half_to_float (a test compares all 65536), without a 256 KiB table whose lines a forward pass's
/// weights evict between layers. A subnormal half shifted into a float's bits is a float
/// subnormal that the 2^112 rescaling makes exact; infinities and NaNs keep their bits.
inline void halves_to_floats(const std::uint16_t* in, int count, float* out) {
#pragma omp simd
  for (int i = 0; i < count; ++i) {
    const std::uint32_t h = in[i], magnitude = (h & 0x7fffu) << 13;
    float f;
    std::memcpy(&f, &magnitude, 4);
    f *= 0x1.0p112f;
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((h & 0x7c00u) == 0x7c00u) u = magnitude | 0x7f800000u;
    u |= (h & 0x8000u) << 16;
    std::memcpy(&out[i], &u, 4);
  }
}

/// OCP fp8 e4m3 (the "fn" variant: no infinities, 0x7f/0xff NaN, largest finite 448) <-> float:
/// round to nearest even, saturating to +-448 as vLLM's fp8 KV cache does; NaN stays NaN.
float e4m3_to_float(std::uint8_t v);
std::uint8_t float_to_e4m3(float f);

}  // namespace memtwin::kernels
