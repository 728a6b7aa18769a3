#pragma once
// Register-level helpers of the AVX2 + FMA + F16C kernels: horizontal sums, a vectorised exp and
// softmax, widening of 8- and 4-bit codes, fp16 and e4m3 loads, software prefetch. Include only
// from translation units compiled with -mavx2 -mfma -mf16c (kernels/CMakeLists.txt).
#if !(defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
#error "kernels/cpu/avx2_vectors.h needs AVX2, FMA and F16C"
#endif

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace memtwin::kernels::simd::avx2 {

// The sum of a vector's eight lanes.
inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The sums of four vectors' lanes, as the four lanes of one: [sum a, sum b, sum c, sum d].
inline __m128 horizontal_sums4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

// exp(x) for x <= 0 (softmax after subtracting the maximum): 2^(x log2 e) as 2^n times a degree-6
// polynomial on [-0.5, 0.5]; relative error below 2e-7, and exp(x) = 0 below -87.
inline __m256 exp_negative(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.0f);
  x = _mm256_max_ps(x, lo);
  const __m256 t = _mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f));
  const __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(t, n);  // in [-0.5, 0.5]
  // 2^f by its Taylor series in f ln 2 (minimax-quality at this degree over the interval).
  __m256 p = _mm256_set1_ps(1.535336188319500e-4f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.339887440266574e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618437357674640e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550332471162809e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402264791363012e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472028550421e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// Scales x[0..n) to exp(x - max) and returns their sum.
inline float softmax_numerators(float* x, int n) {
  float m = *std::max_element(x, x + n);
  const __m256 vm = _mm256_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_negative(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    _mm256_storeu_ps(x + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  float total = horizontal_sum(sum);
  if (i < n) {
    alignas(32) float tail[8] = {};
    const int left = n - i;
    std::memcpy(tail, x + i, sizeof(float) * static_cast<std::size_t>(left));
    const __m256 e = exp_negative(_mm256_sub_ps(_mm256_load_ps(tail), vm));
    _mm256_store_ps(tail, e);
    for (int j = 0; j < left; ++j) total += (x[i + j] = tail[j]);
  }
  return total;
}

// Eight int8 codes, and eight int4 codes from four bytes (element 2i in byte i's low nibble), as floats.
inline __m256 codes8(const std::uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256 codes4(const std::uint8_t* p) {
  std::uint32_t word;
  std::memcpy(&word, p, 4);
  const __m256i bytes = _mm256_cvtepu8_epi32(_mm_cvtsi32_si128(static_cast<int>(word)));
  const __m256i nibbles = _mm256_and_si256(
      _mm256_srlv_epi32(_mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)),
                        _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4)),
      _mm256_set1_epi32(0xf));
  return _mm256_cvtepi32_ps(nibbles);
}

// Sixteen int4 codes from eight bytes, split: `even` gets elements 0, 2, ..., 14 (the low
// nibbles), `odd` elements 1, 3, ..., 15 (the high nibbles). Cheaper than widening them in order;
// the query (K pass) and the accumulators (V pass) are laid out to match (even_odd_position).
inline void codes4_split(const std::uint8_t* p, __m256& even, __m256& odd) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i mask = _mm_set1_epi8(0x0f);
  even = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_and_si128(bytes, mask)));
  odd = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(bytes, 4), mask)));
}

// The order codes4_split produces, per chunk of 16 dimensions: the even ones, then the odd ones.
// position(c + j) for j < 16 within a chunk starting at c.
inline int even_odd_position(int j) { return j % 2 == 0 ? j / 2 : 8 + j / 2; }

// A quantisation group's fp16 scale and zero point, stored side by side, as floats (one vcvtph2ps).
inline void scale_and_zero(const std::uint8_t* p, float& scale, float& zero) {
  std::int32_t both;
  std::memcpy(&both, p, 4);
  const __m128 wide = _mm_cvtph_ps(_mm_cvtsi32_si128(both));
  scale = _mm_cvtss_f32(wide);
  zero = _mm_cvtss_f32(_mm_movehdup_ps(wide));
}

// Eight fp16 values as floats.
inline __m256 load_halves(const std::uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// Eight e4m3 values as floats divided by 2^8: each byte's sign and its 7 other bits moved into a
// half (s eeee mmm -> s 0eeee mmm0000000) read as fp16 is the value x 2^-8 (the biases differ
// by 8), subnormals included. The caller multiplies by 2^8 and the cache's scale once at the end.
inline __m256 load_e4m3_over_256(const std::uint8_t* p) {
  const __m128i bytes = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m128i magnitude = _mm_slli_epi16(_mm_and_si128(bytes, _mm_set1_epi16(0x7f)), 7);
  const __m128i sign = _mm_slli_epi16(_mm_and_si128(bytes, _mm_set1_epi16(0x80)), 8);
  return _mm256_cvtph_ps(_mm_or_si128(magnitude, sign));
}

// Asks for cache lines ahead of use: a block's rows lie in order, but the block table scatters
// the blocks, which the hardware prefetchers cannot foresee.
inline void prefetch(const std::uint8_t* p, std::size_t bytes) {
  for (std::size_t off = 0; off < bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
}
// The same into L2 only: for a whole tile ahead, which would push the tile in use out of L1.
inline void prefetch_l2(const std::uint8_t* p, std::size_t bytes) {
  for (std::size_t off = 0; off < bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T1);
}

}  // namespace memtwin::kernels::simd::avx2
