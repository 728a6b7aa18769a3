#pragma once
// Register-level helpers of the AVX-512 kernels (paged and KIVI decode attention): a vectorised exp,
// lane folds and a transposing horizontal sum, widening of fp16, e4m3, 8- and 4-bit codes, software
// prefetch. Include only from translation units compiled for AVX-512 F/BW/VL/DQ with FMA and F16C
// (kernels/CMakeLists.txt).
#if !(defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
      defined(__AVX512DQ__) && defined(__FMA__) && defined(__F16C__))
#error "kernels/cpu/avx512_vectors.h needs AVX-512 F, BW, VL, DQ, FMA and F16C"
#endif

// GCC 12's AVX-512 intrinsics pass an uninitialised vector as the unused merge source of their
// unmasked forms (_mm512_max_ps and others), which -Wuninitialized reports at every use.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

namespace memtwin::kernels::simd::avx512 {

constexpr int kLanes = 16;

// exp(x) for x <= 0 (softmax after subtracting the maximum): the AVX2 kernel's degree-6 polynomial
// for 2^f on [-0.5, 0.5], scaled by 2^n with vscalefps; relative error below 2e-7.
inline __m512 exp_negative(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(1.535336188319500e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.339887440266574e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618437357674640e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332471162809e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264791363012e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931472028550421e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// The vector rotated by `lanes` lanes (lane i takes lane i + lanes, modulo 16).
inline __m512 rotate(__m512 v, int lanes) {
  const __m512i index = _mm512_and_si512(_mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                          _mm512_set1_epi32(lanes)),
                                         _mm512_set1_epi32(15));
  return _mm512_permutexvar_ps(index, v);
}

// Every lane the maximum (or sum) over the lanes congruent to it modulo G: token-major scores put
// head g in lanes g, g + G, ...
template <int G>
inline __m512 fold_max(__m512 v) {
  for (int lanes = 8; lanes >= G; lanes /= 2) v = _mm512_max_ps(v, rotate(v, lanes));
  return v;
}
template <int G>
inline __m512 fold_sum(__m512 v) {
  for (int lanes = 8; lanes >= G; lanes /= 2) v = _mm512_add_ps(v, rotate(v, lanes));
  return v;
}

// Sixteen vectors' lanes each combined by `op` (add: sums; max: maxima) as one vector: lane i for
// v[i]. Four halving steps, each combining two vectors' halves side by side (45 instructions for
// 16 results). The last step leaves input 4i + c in lane 4c + i, so the inputs are taken in the
// transposed order.
template <class Op>
inline __m512 horizontal16(const __m512* v, Op op) {
  auto in = [v](int k) { return v[(k % 4) * 4 + k / 4]; };
  __m512 x[8], z[4], u[2];
  for (int k = 0; k < 8; ++k) {
    const __m512 a = in(2 * k), b = in(2 * k + 1);
    x[k] = op(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  for (int k = 0; k < 4; ++k) {
    const __m512 a = x[2 * k], b = x[2 * k + 1];
    z[k] = op(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  }
  for (int k = 0; k < 2; ++k) u[k] = op(_mm512_unpacklo_ps(z[2 * k], z[2 * k + 1]), _mm512_unpackhi_ps(z[2 * k], z[2 * k + 1]));
  return op(_mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 2, 3, 2)));
}
inline __m512 horizontal_sums16(const __m512* v) {
  return horizontal16(v, [](__m512 a, __m512 b) { return _mm512_add_ps(a, b); });
}

// Softmax of G heads' token-major scores [t][g] (ctx tokens) in place: exp(s - max_g) for each
// head g, and each head's sum of them in denominators[g]. G = 1: one head's row.
template <int G>
inline void softmax(float* s, int ctx, float* denominators) {
  const int n = ctx * G;
  const int whole = n - n % kLanes;
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - whole)) - 1);
  __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int i = 0; i < whole; i += kLanes) m = _mm512_max_ps(m, _mm512_loadu_ps(s + i));
  if (tail) m = _mm512_max_ps(m, _mm512_mask_loadu_ps(m, tail, s + whole));
  m = fold_max<G>(m);
  __m512 sum = _mm512_setzero_ps();
  for (int i = 0; i < whole; i += kLanes) {
    const __m512 e = exp_negative(_mm512_sub_ps(_mm512_loadu_ps(s + i), m));
    _mm512_storeu_ps(s + i, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (tail) {
    const __m512 e = exp_negative(_mm512_sub_ps(_mm512_mask_loadu_ps(m, tail, s + whole), m));
    _mm512_mask_storeu_ps(s + whole, tail, e);
    sum = _mm512_mask_add_ps(sum, tail, sum, e);
  }
  alignas(64) float lanes[kLanes];
  _mm512_store_ps(lanes, fold_sum<G>(sum));
  for (int g = 0; g < G; ++g) denominators[g] = lanes[g];
}

// Sixteen fp16 elements from element c.
inline __m512 load_halves(const std::uint8_t* vector, int c) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(vector + 2 * c)));
}
// Sixteen e4m3 elements from element c, over 2^8: each byte's sign and other 7 bits moved into a
// half (s eeee mmm -> s 0eeee mmm0000000), read as fp16, is the value x 2^-8 (the biases differ by 8).
inline __m512 load_e4m3_over_256(const std::uint8_t* vector, int c) {
  const __m256i bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(vector + c)));
  const __m256i magnitude = _mm256_slli_epi16(_mm256_and_si256(bytes, _mm256_set1_epi16(0x7f)), 7);
  const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(bytes, _mm256_set1_epi16(0x80)), 8);
  return _mm512_cvtph_ps(_mm256_or_si256(magnitude, sign));
}
// Sixteen 8-bit codes as floats.
inline __m512 codes8(const std::uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
// Thirty-two 4-bit codes from sixteen bytes (element 2i in byte i's low nibble): the even
// elements (low nibbles) or the odd ones (high nibbles), as floats.
template <bool Odd>
inline __m512 codes4(const std::uint8_t* p) {
  const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm512_cvtepi32_ps(Odd ? _mm512_srli_epi32(bytes, 4) : _mm512_and_si512(bytes, _mm512_set1_epi32(0xf)));
}
// Where element e (< 32) of a 32-element chunk sits in the order codes4 widens it (the 16 even
// elements, then the 16 odd ones).
constexpr int codes4_position(int e) { return e % 2 == 0 ? e / 2 : kLanes + e / 2; }
// A quantisation group's fp16 scale and zero point (stored side by side after its codes).
inline void scale_and_zero(const std::uint8_t* p, float& scale, float& zero) {
  std::int32_t both;
  std::memcpy(&both, p, 4);
  const __m128 wide = _mm_cvtph_ps(_mm_cvtsi32_si128(both));
  scale = _mm_cvtss_f32(wide);
  zero = _mm_cvtss_f32(_mm_movehdup_ps(wide));
}

// Sixteen quantisation groups' fp16 scale (low half of each 32-bit lane) and zero point (high
// half), as floats.
inline void scales_and_zeros(__m512i both, __m512& scale, __m512& zero) {
  scale = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(both));
  zero = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(both, 16)));
}

// Asks for cache lines into L2 ahead of use: a block's rows lie in order, but the block table
// scatters the blocks, which the hardware prefetchers cannot foresee.
inline void prefetch_l2(const std::uint8_t* p, std::size_t bytes) {
  for (std::size_t off = 0; off < bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T1);
}

}  // namespace memtwin::kernels::simd::avx512
