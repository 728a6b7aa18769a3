// Quantisation for x86-64 CPUs with AVX2 (quantize_vector's int8/int4/int2, fp8 and fp16 paths), compiled
// alone with -mavx2 -mfma -mf16c and called only after the CPU check. It writes the portable
// kernel's bytes exactly: the same fp16 scale and zero point (F16C rounds as the portable
// conversion does), the same
// IEEE subtraction and division per element, and lround's rounding (half away from zero) as
// floor(v) + (v - floor(v) >= 0.5), which is exact for the values that are not clamped to 0.
#include "kernels/cpu/quantize_simd.h"

#if defined(__x86_64__) && defined(__AVX2__)

#include <immintrin.h>

#include <cstring>

namespace memtwin::kernels::simd {
namespace {

float reduce(__m256 v, bool maximum) {
  __m128 s = maximum ? _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1))
                     : _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 high = _mm_movehl_ps(s, s);
  s = maximum ? _mm_max_ps(s, high) : _mm_min_ps(s, high);
  const __m128 odd = _mm_movehdup_ps(s);
  s = maximum ? _mm_max_ss(s, odd) : _mm_min_ss(s, odd);
  return _mm_cvtss_f32(s);
}

// Eight codes of x[0..8) as bytes in the low 8 of the result (the rest zero).
__m128i codes_of(const float* x, __m256 zero, __m256 scale, __m256 levels) {
  const __m256 v = _mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(x), zero), scale);
  const __m256 down = _mm256_floor_ps(v);
  const __m256 up = _mm256_and_ps(_mm256_cmp_ps(_mm256_sub_ps(v, down), _mm256_set1_ps(0.5f), _CMP_GE_OQ), _mm256_set1_ps(1.f));
  const __m256 rounded = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(down, up), _mm256_setzero_ps()), levels);
  const __m256i codes = _mm256_cvttps_epi32(rounded);
  const __m128i words = _mm_packus_epi32(_mm256_castsi256_si128(codes), _mm256_extracti128_si256(codes, 1));
  return _mm_packus_epi16(words, _mm_setzero_si128());
}

// Eight floats as OCP e4m3 codes (in the low byte of each lane), as float_to_e4m3 rounds them:
// to nearest even, saturating at +-448 (infinities too), NaN to 0x7f with its sign.
__m256i e4m3_of(__m256 y) {
  const __m256i bits = _mm256_castps_si256(y);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(bits, 24), _mm256_set1_epi32(0x80));
  const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.f), y);
  const __m256i abits = _mm256_castps_si256(a);
  // Normal codes: the exponent and the top three mantissa bits, rounded to nearest even by adding
  // just under half a unit plus the kept lowest bit (a carry moves into the exponent correctly),
  // then the exponent rebiased from 127 to 7.
  const __m256i lowest = _mm256_and_si256(_mm256_srli_epi32(abits, 20), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(abits, _mm256_add_epi32(_mm256_set1_epi32(0x7ffff), lowest)), 20);
  const __m256i normal = _mm256_sub_epi32(rounded, _mm256_set1_epi32(120 << 3));
  // Below 2^-6: steps of 2^-9 (x 512 is exact, then rounded to nearest even).
  const __m256i small = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(a, _mm256_set1_ps(512.f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  __m256i code = _mm256_blendv_epi8(normal, small, _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(0.015625f), _CMP_LT_OQ)));
  code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7e), _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(448.f), _CMP_GE_OQ)));
  code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7f), _mm256_castps_si256(_mm256_cmp_ps(a, a, _CMP_UNORD_Q)));
  return _mm256_or_si256(code, sign);
}

}  // namespace

bool quantize_fp8_avx2(const float* x, const KvFormat& f, std::uint8_t* out) {
  if (f.head_dim % 16 != 0) return false;
  const __m256 scale = _mm256_set1_ps(f.fp8_scale);
  for (int i = 0; i < f.head_dim; i += 16) {
    const __m256i lo = e4m3_of(_mm256_div_ps(_mm256_loadu_ps(x + i), scale));
    const __m256i hi = e4m3_of(_mm256_div_ps(_mm256_loadu_ps(x + i + 8), scale));
    // 32-bit lanes to bytes: packs work within 128-bit halves, so put the halves in order after.
    const __m256i words = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
    const __m128i bytes = _mm_packus_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), bytes);
  }
  return true;
}

bool quantize_fp16_avx2(const float* x, const KvFormat& f, std::uint8_t* out) {
  if (f.head_dim % 8 != 0) return false;
  // F16C's conversion rounds to nearest even, subnormals included, as float_to_half does.
  for (int i = 0; i < f.head_dim; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  return true;
}

bool quantize_groups_avx2(const float* x, const KvFormat& f, std::uint8_t* out) {
  const int bits = f.bits();
  if (f.group % 32 != 0 || (bits != 8 && bits != 4 && bits != 2)) return false;
  const __m256 levels = _mm256_set1_ps(static_cast<float>((1 << bits) - 1));
  for (int g = 0; g < f.groups(); ++g) {
    const float* xs = x + g * f.group;
    std::uint8_t* base = out + static_cast<std::size_t>(g) * f.group_bytes();
    __m256 lo = _mm256_loadu_ps(xs), hi = lo;
    for (int i = 8; i < f.group; i += 8) {
      const __m256 v = _mm256_loadu_ps(xs + i);
      lo = _mm256_min_ps(lo, v);
      hi = _mm256_max_ps(hi, v);
    }
    // F16C converts as float_to_half does (round to nearest even, subnormals kept).
    const float low = reduce(lo, false);
    const std::uint16_t scale_h = _cvtss_sh((reduce(hi, true) - low) / static_cast<float>((1 << bits) - 1), _MM_FROUND_TO_NEAREST_INT);
    const std::uint16_t zero_h = _cvtss_sh(low, _MM_FROUND_TO_NEAREST_INT);
    const float scale = _cvtsh_ss(scale_h), zero = _cvtsh_ss(zero_h);
    if (!(scale > 0) || !(scale < 3.0e38f)) return false;  // degenerate groups: the portable kernel's rules
    const __m256 vz = _mm256_set1_ps(zero), vs = _mm256_set1_ps(scale);
    // Sixteen codes at a time, kept in a register (a store and reload would stall forwarding),
    // packed: int8 as is; int4 element 2i in byte i's low nibble; int2 element 4i + k at bits 2k.
    for (int i = 0; i < f.group; i += 16) {
      __m128i c = _mm_unpacklo_epi64(codes_of(xs + i, vz, vs, levels), codes_of(xs + i + 8, vz, vs, levels));
      if (bits == 8) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(base + i), c);
        continue;
      }
      // Pairs of bytes into one: low | high << (bits), as 16-bit lanes, then narrowed.
      __m128i pairs = _mm_or_si128(_mm_and_si128(c, _mm_set1_epi16(0x00ff)), _mm_slli_epi16(_mm_srli_epi16(c, 8), bits));
      c = _mm_packus_epi16(pairs, _mm_setzero_si128());  // 8 bytes: nibbles (int4) or 4-bit pairs (int2)
      if (bits == 4) {
        _mm_storel_epi64(reinterpret_cast<__m128i*>(base + i / 2), c);
        continue;
      }
      pairs = _mm_or_si128(_mm_and_si128(c, _mm_set1_epi16(0x00ff)), _mm_slli_epi16(_mm_srli_epi16(c, 8), 4));
      c = _mm_packus_epi16(pairs, _mm_setzero_si128());  // 4 bytes of four 2-bit codes
      const int packed = _mm_cvtsi128_si32(c);
      std::memcpy(base + i / 4, &packed, 4);
    }
    std::memcpy(base + f.code_bytes_per_group(), &scale_h, 2);
    std::memcpy(base + f.code_bytes_per_group() + 2, &zero_h, 2);
  }
  return true;
}

}  // namespace memtwin::kernels::simd

#else

namespace memtwin::kernels::simd {
bool quantize_groups_avx2(const float*, const KvFormat&, std::uint8_t*) { return false; }
bool quantize_fp8_avx2(const float*, const KvFormat&, std::uint8_t*) { return false; }
bool quantize_fp16_avx2(const float*, const KvFormat&, std::uint8_t*) { return false; }
}  // namespace memtwin::kernels::simd

#endif
