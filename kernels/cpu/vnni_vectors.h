#pragma once
// Register-level helpers of the AVX-512 VNNI kernels (the paged kernel's integer K and V passes,
// KIVI's integer K pass): the dot-product instructions with a broadcast word, and two byte runs'
// codes paired into 32-bit lanes for vpdpwssd. Include only from translation units compiled with
// AVX-512 VNNI as well as avx512_vectors.h's instruction sets (kernels/CMakeLists.txt).
#if !defined(__AVX512VNNI__)
#error "kernels/cpu/vnni_vectors.h needs AVX-512 VNNI"
#endif
#include "kernels/cpu/avx512_vectors.h"

namespace memtwin::kernels::simd::vnni {

// acc + the products of each lane's four unsigned bytes (vpdpbusd) or two signed 16-bit words
// (vpdpwssd) in `codes` with the four signed bytes or two words of base[Word], broadcast from
// memory inside the instruction. Written out because GCC 12 neither folds _mm512_set1_epi32 into
// the broadcast operand (it spends a separate broadcast on every product) nor keeps the
// accumulator in place (it moves it between registers around the destructive instruction); and
// addressed from one base register plus a constant because with a register for each word's
// address GCC runs out of them and moves addresses through vectors. Reads base[0 .. Span - 1].
template <int Word, int Span>
inline __m512i dot_bytes(__m512i acc, __m512i codes, const std::int32_t* base) {
  asm("vpdpbusd %c[offset](%[base])%{1to16%}, %[c], %[acc]"
      : [acc] "+v"(acc)
      : [c] "v"(codes), [base] "r"(base), [offset] "i"(4 * Word), "m"(*reinterpret_cast<const std::int32_t(*)[Span]>(base)));
  return acc;
}
template <int Word, int Span>
inline __m512i dot_words(__m512i acc, __m512i codes, const std::int32_t* base) {
  asm("vpdpwssd %c[offset](%[base])%{1to16%}, %[c], %[acc]"
      : [acc] "+v"(acc)
      : [c] "v"(codes), [base] "r"(base), [offset] "i"(4 * Word), "m"(*reinterpret_cast<const std::int32_t(*)[Span]>(base)));
  return acc;
}

// Thirty-two codes each of two runs a and b, element i of both in one 32-bit lane as 16-bit
// words (a's low), for vpdpwssd against word pairs (w_a, w_b). 8-bit codes (32 bytes a run):
// x[0] lane l holds element 8 (l / 4) + l % 4, x[1] four elements further (pair_position);
// 4-bit codes (16 bytes, element 2i in byte i's low nibble): x[0] lane l element 2l, x[1] 2l + 1.
template <bool Int4>
inline void pair_codes(const std::uint8_t* a, const std::uint8_t* b, __m512i* x) {
  if constexpr (Int4) {
    const __m128i ta = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
    const __m128i tb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
    const __m256i bytes = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi8(ta, tb)), _mm_unpackhi_epi8(ta, tb), 1);
    const __m512i words = _mm512_cvtepu8_epi16(bytes);  // lane i: byte i of a, byte i of b
    x[0] = _mm512_and_si512(words, _mm512_set1_epi16(0x0f));
    x[1] = _mm512_srli_epi16(words, 4);
  } else {
    const __m512i wa = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)));
    const __m512i wb = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)));
    x[0] = _mm512_unpacklo_epi16(wa, wb);
    x[1] = _mm512_unpackhi_epi16(wa, wb);
  }
}
// Where element e (< 32) of pair_codes's runs sits among its 32 lanes (x[0]'s, then x[1]'s).
template <bool Int4>
constexpr int pair_position(int e) {
  if constexpr (Int4) return (e % 2) * avx512::kLanes + e / 2;
  return ((e / 4) % 2) * avx512::kLanes + (e / 8) * 4 + e % 4;
}

// Thirty-two values rounded to 16 bits in two vectors (elements 0-15, 16-31) packed into sixteen
// words of two by _mm512_packs_epi32, which interleaves the vectors' 128-bit lanes: the word that
// holds elements 2j and 2j + 1.
constexpr int word_of_pair(int j) { return j < 8 ? 4 * (j / 2) + j % 2 : 4 * ((j - 8) / 2) + 2 + j % 2; }

}  // namespace memtwin::kernels::simd::vnni
