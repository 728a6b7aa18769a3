#pragma once
// Internal to kernels/cpu: the arithmetic of round_query_to_bytes (kv_kernels.h states it), inline
// so that the VNNI kernel's translation unit, built for AVX-512, takes a copy of its own in vectors
// of sixteen (quantize.cpp, built for baseline x86-64, defines the public function from the scalar
// loops; both do the same IEEE operations, so give the same bytes: vnni_round_query_to_bytes's
// test). At 1K tokens the baseline build's copy took 3% of an int4 decode call.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#endif

namespace memtwin::kernels::detail {

// x rounded to the nearest integer, ties to even, for |x| < 2^22: adding 1.5 x 2^23 leaves no
// fraction bits, so the addition rounds (in the default rounding mode; the build allows no
// reassociation). std::nearbyint is a libm call on baseline x86-64.
inline float round_to_even(float x) { return (x + 12582912.f) - 12582912.f; }

#if defined(__AVX512F__) && defined(__AVX512BW__)
// round_query_group for groups of a multiple of 16 elements, sixteen at a time: the same operations
// lane by lane (the compiler's own vectorisation of the loops below juggles masks for std::clamp and
// leaves a group of 32 to its scalar epilogue).
inline void round_query_group_avx512(const float* x, int group, std::int8_t* high, std::int8_t* low, float& scale_out) {
  __m512 largest_lanes = _mm512_setzero_ps();
  for (int i = 0; i < group; i += 16) largest_lanes = _mm512_max_ps(largest_lanes, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
  const float scale = _mm512_reduce_max_ps(largest_lanes) / 127.f;
  scale_out = scale;
  if (!(scale > 0)) {
    std::fill(high, high + group, std::int8_t{0});
    std::fill(low, low + group, std::int8_t{0});
    return;
  }
  const __m512 by = _mm512_set1_ps(scale), shift = _mm512_set1_ps(12582912.f), steps_256 = _mm512_set1_ps(256.f);
  const __m512 lowest = _mm512_set1_ps(-127.f), highest = _mm512_set1_ps(127.f);
  for (int i = 0; i < group; i += 16) {
    const __m512 steps = _mm512_div_ps(_mm512_loadu_ps(x + i), by);
    const __m512 whole = _mm512_sub_ps(_mm512_add_ps(steps, shift), shift);
    const __m512 rest = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(steps, whole), steps_256), shift), shift);
    const __m512 clamped = _mm512_max_ps(lowest, _mm512_min_ps(rest, highest));  // std::clamp for finite values
    _mm_storeu_si128(reinterpret_cast<__m128i*>(high + i), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(whole)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(low + i), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(clamped)));
  }
}
#endif

// One group of `group` elements: its scale (largest magnitude / 127) and each element's high and
// low bytes.
inline void round_query_group(const float* x, int group, std::int8_t* high, std::int8_t* low, float& scale_out) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
  if (group % 16 == 0) return round_query_group_avx512(x, group, high, low, scale_out);
#endif
  float largest = 0;
#pragma omp simd reduction(max : largest)
  for (int i = 0; i < group; ++i) largest = std::max(largest, std::fabs(x[i]));
  const float scale = largest / 127.f;  // 0 for a zero run (or one so small that the scale underflows)
  scale_out = scale;
  if (!(scale > 0)) {
    std::fill(high, high + group, std::int8_t{0});
    std::fill(low, low + group, std::int8_t{0});
    return;
  }
  // From the quotient by the scale (not a product with its inverse), so that the largest element
  // is exactly +-127 and every code within [-127, 127]. (A branch-free loop: the compiler
  // vectorises it.)
#pragma omp simd
  for (int i = 0; i < group; ++i) {
    const float steps = x[i] / scale;
    const float whole = round_to_even(steps);
    high[i] = static_cast<std::int8_t>(whole);
    low[i] = static_cast<std::int8_t>(std::clamp(round_to_even((steps - whole) * 256.f), -127.f, 127.f));
  }
}

// Every group of `elements` (a multiple of `group`), one after another.
inline void round_query_groups(const float* q, int elements, int group, std::int8_t* high, std::int8_t* low, float* scales) {
  for (int g = 0; g < elements / group; ++g) {
    const std::size_t first = static_cast<std::size_t>(g) * group;
    round_query_group(q + first, group, high + first, low + first, scales[g]);
  }
}

}  // namespace memtwin::kernels::detail
