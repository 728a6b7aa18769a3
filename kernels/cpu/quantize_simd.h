#pragma once
// The vectorised quantisers (quantize_avx2.cpp, compiled for AVX2). Internal to kernels/:
// quantize_vector() dispatches after checking the CPU (simd::avx2_supported()).
#include <cstdint>

#include "kernels/kv_format.h"

namespace memtwin::kernels::simd {

/// Writes exactly what the portable quantiser writes for an int8/int4/int2 vector; false (the
/// output then partly written, to be overwritten) for what it does not handle: groups not a
/// multiple of 32, or a group whose fp16 scale is zero or not finite.
bool quantize_groups_avx2(const float* x, const KvFormat& f, std::uint8_t* out);
/// The same for fp8 (e4m3 of x / fp8_scale); false for head_dim not a multiple of 16.
bool quantize_fp8_avx2(const float* x, const KvFormat& f, std::uint8_t* out);
/// The same for fp16 (F16C); false for head_dim not a multiple of 8. Finite inputs (NaN payloads
/// may differ).
bool quantize_fp16_avx2(const float* x, const KvFormat& f, std::uint8_t* out);

}  // namespace memtwin::kernels::simd
