// The AVX-512 paged kernel's K pass for 8- and 4-bit keys with VNNI (vpdpbusd: sixteen lanes, each
// adding four unsigned-by-signed byte products to a 32-bit sum), as llama.cpp's CPU backend dots
// its quantised blocks against activations rounded to bytes. This file alone is compiled with
// AVX-512 VNNI; the AVX-512 kernel calls it only on CPUs that have it (SimdLevel::avx512_vnni).
//
// A key's group (codes c_i, scale s, zero point z: k_i = s c_i + z) against the rounded query
// q'_i = r (h_i + l_i / 256) (round_query_to_bytes, the same groups):
//   q' . k = s (r / 256) sum_i (256 h_i + l_i) c_i + z r sum_i (h_i + l_i / 256)
// where sum_i (256 h_i + l_i) c_i = 256 sum_i h_i c_i + sum_i l_i c_i is exact in 32-bit integers
// (groups up to 128 channels). The lanes are tokens: sixteen tokens' group codes are transposed
// (each 32-bit lane then holds four consecutive codes of its token; 4-bit codes split into their
// low and high nibbles, the query's bytes arranged to match), so every vpdpbusd adds four products
// to each of sixteen scores, with four of the query's bytes broadcast, and a group's scale and zero
// point (sixteen tokens' in a register) apply once per group. Each chunk is transposed once and
// feeds both sums, kept in registers of their own (for G = 8 query heads: 8 code registers and 16
// sums); one sum a head, with the chunks transposed again for the low bytes, kept the codes in
// memory and was 6-9% slower at int4. The floating-point K pass, by
// contrast, widens each code and spends a multiply-add per element and query head, then sums each
// score across lanes.
#include "kernels/cpu/decode_attention_simd.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__) && defined(__AVX512VNNI__) && defined(__FMA__) && defined(__F16C__)

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/avx512_vectors.h"
#include "kernels/cpu/paged_rows.h"
#include "kernels/cpu/round_query.h"
#include "kernels/cpu/vnni_vectors.h"
#include "kernels/kv_kernels.h"

namespace memtwin::kernels::simd {

namespace {

using namespace avx512;
using namespace vnni;

constexpr int kChunk = 32;  // channels of a transposed chunk: 32 bytes of 8-bit codes, 16 of 4-bit
constexpr int kAhead = 16;  // tokens prefetched ahead into L2, as the floating-point K pass does

// The query heads of a range of KV heads rounded to bytes, in the order the dot products take
// them: per KV head, group, chunk and part (high bytes, low bytes), each of its G query heads'
// eight 32-bit words of four bytes; and per query head and group r / 256 and
// r sum_i (h_i + l_i / 256).
struct RoundedQuery {
  std::vector<std::int32_t> words;        // [KV head][group][chunk][part][G][8]
  std::vector<float> scale, zero_weight;  // [head][group]
  std::vector<std::int8_t> high, low;     // [head][head_dim], as rounded
  int groups = 0, chunks = 0, group_heads = 1;

  void build(const float* q, int heads, int query_heads_per_kv_head, const KvFormat& f) {
    const int hd = f.head_dim, group = f.group;
    groups = f.groups();
    chunks = group / kChunk;
    group_heads = query_heads_per_kv_head;
    high.resize(static_cast<std::size_t>(heads) * hd);
    low.resize(high.size());
    scale.resize(static_cast<std::size_t>(heads) * groups);
    zero_weight.resize(scale.size());
    words.resize(static_cast<std::size_t>(heads) * groups * chunks * 16);
    // Plain pointers: stores through std::int8_t may alias the vectors' members, which the loops
    // would otherwise reload after every byte.
    std::int8_t* const high_bytes = high.data();
    std::int8_t* const low_bytes = low.data();
    float* const scales = scale.data();
    float* const zero_weights = zero_weight.data();
    // The bytes' order in a chunk's words. 8-bit codes: word k holds channels 4k .. 4k + 3, as
    // rounded; 4-bit codes: words 2k and 2k + 1 the channels of the low nibbles of bytes 4k .. 4k + 3
    // (8k, 8k + 2, ...), then of the high nibbles (8k + 1, 8k + 3, ...): each run of eight bytes,
    // its even bytes first.
    const __m256i order = f.bits() == 4 ? _mm256_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15, 0, 2, 4, 6, 1, 3, 5,
                                                           7, 8, 10, 12, 14, 9, 11, 13, 15)
                                        : _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6,
                                                           7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int h = 0; h < heads; ++h) {
      for (int gi = 0; gi < groups; ++gi) {
        const std::size_t hg = static_cast<std::size_t>(h) * groups + gi;
        const std::size_t first = static_cast<std::size_t>(h) * hd + static_cast<std::size_t>(gi) * group;
        std::int8_t* const hi = high_bytes + first;
        std::int8_t* const lo = low_bytes + first;
        detail::round_query_group(q + first, group, hi, lo, scales[hg]);  // round_query_to_bytes, this build's copy
        __m512i sums = _mm512_setzero_si512();  // sum_i (256 h_i + l_i), sixteen channels a lane
        for (int i = 0; i < group; i += kLanes) {
          const __m512i h16 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hi + i)));
          const __m512i l16 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo + i)));
          sums = _mm512_add_epi32(sums, _mm512_add_epi32(_mm512_slli_epi32(h16, 8), l16));
        }
        const int sum = _mm512_reduce_add_epi32(sums);
        zero_weights[hg] = scales[hg] * (static_cast<float>(sum) / 256.f);
        scales[hg] /= 256.f;
        for (int ch = 0; ch < chunks; ++ch) {
          for (int part = 0; part < 2; ++part) {
            const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>((part == 0 ? hi : lo) + ch * kChunk));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(chunk_words(h / group_heads, gi, ch, part) + (h % group_heads) * 8),
                                _mm256_shuffle_epi8(bytes, order));
          }
        }
      }
    }
  }
  // The G query heads' eight words of a chunk's high bytes (part 0) or low bytes (part 1).
  [[nodiscard]] std::int32_t* chunk_words(int kv_head, int gi, int ch, int part) {
    return &words[((((static_cast<std::size_t>(kv_head) * groups + gi) * chunks + ch) * 2 + part) * group_heads) * 8];
  }
  [[nodiscard]] const std::int32_t* chunk_words(int kv_head, int gi, int ch, int part) const {
    return const_cast<RoundedQuery*>(this)->chunk_words(kv_head, gi, ch, part);
  }
};

// Sixteen tokens' 32 bytes of 8-bit codes at rows[j] + at, transposed: lane j of d[k] holds token
// j's bytes 4k .. 4k + 3.
inline void transpose_codes8(const std::uint8_t* const* rows, std::size_t at, __m512i* d) {
  __m512i r[8], t[8], u[8];
  for (int j = 0; j < 8; ++j) {  // row j in the low 256 bits, row j + 8 in the high
    r[j] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[j] + at))),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[j + 8] + at)), 1);
  }
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {  // u[4i + m]: rows 4i .. 4i + 3 (and + 8) of words m and m + 4
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  const __m512i low = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), high = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  for (int m = 0; m < 4; ++m) {
    d[m] = _mm512_permutex2var_epi64(u[m], low, u[m + 4]);
    d[m + 4] = _mm512_permutex2var_epi64(u[m], high, u[m + 4]);
  }
}

// Sixteen tokens' 16 bytes of 4-bit codes at rows[j] + at, transposed and split: lane j of d[2k]
// holds the low nibbles of token j's bytes 4k .. 4k + 3, d[2k + 1] their high nibbles.
inline void transpose_codes4(const std::uint8_t* const* rows, std::size_t at, __m512i* d) {
  __m512i r[4];
  for (int j = 0; j < 4; ++j) {  // 128-bit lane L: row 4L + j
    __m512i x = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j] + at)));
    x = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j + 4] + at)), 1);
    x = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j + 8] + at)), 2);
    r[j] = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j + 12] + at)), 3);
  }
  const __m512i t0 = _mm512_unpacklo_epi32(r[0], r[1]), t1 = _mm512_unpackhi_epi32(r[0], r[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(r[2], r[3]), t3 = _mm512_unpackhi_epi32(r[2], r[3]);
  const __m512i words[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2), _mm512_unpacklo_epi64(t1, t3),
                            _mm512_unpackhi_epi64(t1, t3)};
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  for (int k = 0; k < 4; ++k) {
    d[2 * k] = _mm512_and_si512(words[k], nibble);
    d[2 * k + 1] = _mm512_and_si512(_mm512_srli_epi16(words[k], 4), nibble);
  }
}

// FixedChunks, FixedGroups: a group's chunks and a vector's groups where known when compiled,
// else 0 (then the format's).
template <int G, bool Int4, int FixedChunks, int FixedGroups>
void key_scores(const DecodeAttentionArgs& a, const std::int32_t* table, const RoundedQuery& rq, const Heads& heads,
                int ctx, float* scores) {
  const Layout layout(a.shape);
  const int chunks = FixedChunks > 0 ? FixedChunks : rq.chunks, groups = FixedGroups > 0 ? FixedGroups : layout.groups;
  const std::size_t bytes = layout.vector_bytes, span = bytes * static_cast<std::size_t>(heads.count);
  const std::size_t chunk_bytes = Int4 ? kChunk / 2 : kChunk;
  const __m512 score_scale = _mm512_set1_ps(a.scale);
  Rows rows(a.k_cache, table, layout, heads.first, ctx, 0), ahead(a.k_cache, table, layout, heads.first, ctx, kAhead);
  const std::uint8_t* block[kLanes];
  const std::uint8_t* next[kLanes];  // the rows of the block after, fetched into L2 a head at a time
  const std::size_t lines = (span + 63) / 64;
  for (int t0 = 0; t0 < ctx; t0 += kLanes) {
    const int n = std::min(kLanes, ctx - t0);
    int ahead_rows = 0;
    for (int j = 0; j < kLanes; ++j) {
      block[j] = j < n ? rows.row() : block[n - 1];  // past the end: the last token again, its scores not stored
      if (j < n) {
        rows.next();
        if (ahead.valid()) next[ahead_rows++] = ahead.row();
        ahead.next();
      }
    }
    for (int h = 0; h < heads.count; ++h) {
      // A head's share of the next rows' cache lines: a whole block's at once (hundreds of lines)
      // stalls on the fetches in flight.
      for (std::size_t line = lines * h / heads.count; line < lines * (h + 1) / heads.count; ++line)
        for (int j = 0; j < ahead_rows; ++j) _mm_prefetch(reinterpret_cast<const char*>(next[j] + 64 * line), _MM_HINT_T1);
      __m512 acc[G];
      for (__m512& x : acc) x = _mm512_setzero_ps();
      for (int gi = 0; gi < groups; ++gi) {
        const std::size_t at = static_cast<std::size_t>(h) * bytes + static_cast<std::size_t>(gi) * layout.group_bytes;
        // The sixteen tokens' fp16 scale (low half) and zero point (high half), loaded one by one:
        // AVX-512's gather took twice as long on Zen 4.
        auto word = [&](int j) {
          std::int32_t x;
          std::memcpy(&x, block[j] + at + layout.code_bytes, 4);
          return x;
        };
        const __m512i both = _mm512_setr_epi32(word(0), word(1), word(2), word(3), word(4), word(5), word(6), word(7), word(8),
                                               word(9), word(10), word(11), word(12), word(13), word(14), word(15));
        __m512 key_scale, key_zero;
        scales_and_zeros(both, key_scale, key_zero);
        // sum_i h_i c_i and sum_i l_i c_i in registers of their own, each chunk transposed once.
        __m512i high[G], low[G];
        for (int g = 0; g < G; ++g) high[g] = low[g] = _mm512_setzero_si512();
        for (int ch = 0; ch < chunks; ++ch) {
          __m512i d[8];
          if constexpr (Int4) {
            transpose_codes4(block, at + ch * chunk_bytes, d);
          } else {
            transpose_codes8(block, at + ch * chunk_bytes, d);
          }
          const std::int32_t* w_high = rq.chunk_words(h, gi, ch, 0);
          const std::int32_t* w_low = rq.chunk_words(h, gi, ch, 1);
          [&]<int... Gs>(std::integer_sequence<int, Gs...>) {
            auto head = [&]<int Gi>(std::integral_constant<int, Gi>) {
              [&]<int... Ks>(std::integer_sequence<int, Ks...>) {
                ((high[Gi] = dot_bytes<Gi * 8 + Ks, G * 8>(high[Gi], d[Ks], w_high)), ...);
                ((low[Gi] = dot_bytes<Gi * 8 + Ks, G * 8>(low[Gi], d[Ks], w_low)), ...);
              }(std::make_integer_sequence<int, 8>{});
            };
            (head(std::integral_constant<int, Gs>{}), ...);
          }(std::make_integer_sequence<int, G>{});
        }
        __m512i dot[G];
        for (int g = 0; g < G; ++g) dot[g] = _mm512_add_epi32(_mm512_slli_epi32(high[g], 8), low[g]);
        for (int g = 0; g < G; ++g) {
          const std::size_t hg = (static_cast<std::size_t>(h) * G + g) * groups + gi;
          acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[g]), _mm512_mul_ps(key_scale, _mm512_set1_ps(rq.scale[hg])), acc[g]);
          acc[g] = _mm512_fmadd_ps(key_zero, _mm512_set1_ps(rq.zero_weight[hg]), acc[g]);
        }
      }
      const __mmask16 valid = static_cast<__mmask16>((1u << n) - 1);
      for (int g = 0; g < G; ++g)
        _mm512_mask_storeu_ps(scores + static_cast<std::size_t>(h * G + g) * ctx + t0, valid, _mm512_mul_ps(acc[g], score_scale));
    }
  }
}

// integer_passes_fixed_shape's loops' counts fixed when compiled: 3% of int4 decode attention at
// 1K context on Zen 4.
template <int G, bool Int4>
void key_scores_for(const DecodeAttentionArgs& a, const std::int32_t* table, const RoundedQuery& rq, const Heads& heads,
                    int ctx, float* scores) {
  if (integer_passes_fixed_shape(a.shape.format)) return key_scores<G, Int4, 1, 4>(a, table, rq, heads, ctx, scores);
  key_scores<G, Int4, 0, 0>(a, table, rq, heads, ctx, scores);
}

template <bool Int4>
void key_scores_of(const DecodeAttentionArgs& a, const std::int32_t* table, const RoundedQuery& rq, const Heads& heads,
                   int ctx, float* scores) {
  switch (a.q_heads / a.shape.kv_heads) {
    case 1: key_scores_for<1, Int4>(a, table, rq, heads, ctx, scores); break;
    case 2: key_scores_for<2, Int4>(a, table, rq, heads, ctx, scores); break;
    case 4: key_scores_for<4, Int4>(a, table, rq, heads, ctx, scores); break;
    default: key_scores_for<8, Int4>(a, table, rq, heads, ctx, scores); break;
  }
}

}  // namespace

void vnni_round_query_to_bytes(const float* q, int elements, int group, std::int8_t* high, std::int8_t* low, float* scales) {
  detail::round_query_groups(q, elements, group, high, low, scales);  // this build's copy
}

bool vnni_takes(const KvFormat& f) {
  // Up to 128 channels a group: 256 x 255 x 127 x 128 stays within a 32-bit sum.
  return f.quantized() && (f.bits() == 8 || f.bits() == 4) && f.group % kChunk == 0 && f.group <= 128;
}

void vnni_key_scores(const DecodeAttentionArgs& a, int seq, int first_kv_head, int kv_heads, float* scores) {
  const KvFormat& f = a.shape.format;
  const int group_heads = a.q_heads / a.shape.kv_heads;
  const float* q = a.query + (static_cast<std::size_t>(seq) * a.q_heads + static_cast<std::size_t>(first_kv_head) * group_heads) *
                                 f.head_dim;
  thread_local RoundedQuery rq;
  rq.build(q, kv_heads * group_heads, group_heads, f);
  const std::int32_t* table = a.block_tables + static_cast<std::size_t>(seq) * a.max_blocks_per_seq;
  const Heads heads{first_kv_head, kv_heads};
  if (f.bits() == 4) {
    key_scores_of<true>(a, table, rq, heads, a.context_lens[seq], scores);
  } else {
    key_scores_of<false>(a, table, rq, heads, a.context_lens[seq], scores);
  }
}

}  // namespace memtwin::kernels::simd

#else

namespace memtwin::kernels::simd {
void vnni_round_query_to_bytes(const float*, int, int, std::int8_t*, std::int8_t*, float*) {}
bool vnni_takes(const KvFormat&) { return false; }
void vnni_key_scores(const DecodeAttentionArgs&, int, int, int, float*) {}
}  // namespace memtwin::kernels::simd

#endif
