// KIVI decode attention for x86-64 CPUs with AVX2, FMA and F16C: the arithmetic of the portable
// kernel (attend_kivi in kivi_paged.cpp), arranged for the vector units. This file alone is
// compiled with -mavx2 -mfma -mf16c; kivi_decode_attention() calls it only on CPUs that have them.
//
// Per sequence (or a range of its KV heads, when threads outnumber sequences), its memory read in
// order (a group's KV heads one after another, then the residual's tokens), and per KV head up to
// four query heads of its GQA group at once:
//   K pass  a key group's scores from its codes: q.k_t = sum_c (q_c scale_c) code_ct + sum_c q_c zero_c.
//           The weights q_c scale_c are formed once per group and head, then 16 tokens at a time
//           every channel's 16 codes are widened once (in token order) and multiplied into each
//           head's two accumulators, which stay in registers across the channels;
//   softmax a vectorised exp;
//   V pass  in code space, as the AVX2 paged kernel does: per value group of a token,
//           sum_t p_t (scale_t code_t + zero_t) = sum_t (p_t scale_t) code_t + sum_t p_t zero_t,
//           16 channels at a time accumulated in registers across a group's tokens.
// The residual's fp16 tokens take plain dot products and weighted sums.
#include "kernels/cpu/decode_attention_simd.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/avx2_vectors.h"
#include "kernels/cpu/kivi_sequence_range.h"

namespace memtwin::kernels::simd {

namespace {

using namespace avx2;  // the register-level helpers written for the AVX2 kernels

constexpr int kMaxHeadDim = 256;

// Sixteen codes of Bits bits each, packed lowest bits first, as floats in order: elements 0-7 in
// `lo`, 8-15 in `hi`.
template <int Bits>
inline void codes16(const std::uint8_t* p, __m256& lo, __m256& hi) {
  if constexpr (Bits == 8) {
    lo = codes8(p);
    hi = codes8(p + 8);
  } else if constexpr (Bits == 4) {
    lo = codes4(p);
    hi = codes4(p + 4);
  } else {  // 2 bits: all sixteen in one word
    std::uint32_t word;
    std::memcpy(&word, p, 4);
    const __m256i all = _mm256_set1_epi32(static_cast<int>(word)), mask = _mm256_set1_epi32(0x3);
    lo = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(all, _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)), mask));
    hi = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(all, _mm256_setr_epi32(16, 18, 20, 22, 24, 26, 28, 30)), mask));
  }
}

// One sequence's KV heads [first_kv_head, end_kv_head): see the file's comment. H query heads of a
// KV head at a time (H divides the GQA group).
template <int Bits, int H>
void attend(const KiviDecodeArgs& a, int seq, int first_kv_head, int end_kv_head) {
  const KiviPagedShape& s = a.shape;
  const int hd = s.head_dim, G = s.group, gqa = a.q_heads / s.kv_heads;
  const std::int64_t n = a.context_lens[seq], quantized = s.quantized_tokens(n), groups = quantized / G;
  const std::size_t channel_bytes = s.key_group_bytes() / static_cast<std::size_t>(hd);  // a key channel: G codes, scale, zero
  const KvFormat value_format = s.value_format();
  const std::size_t value_bytes = value_format.vector_bytes();
  const int value_groups = value_format.groups(), value_group_bytes = value_format.group_bytes();
  const KiviSequenceRange range{s, a.block_tables + static_cast<std::size_t>(seq) * a.max_blocks_per_seq,
                                const_cast<std::uint8_t*>(a.cache)};
  const float* queries = a.query + static_cast<std::size_t>(seq) * a.q_heads * hd;  // [q_heads][hd]
  thread_local std::vector<float> scores, acc, zero_sums, denominators;
  scores.resize(static_cast<std::size_t>(a.q_heads) * n);
  acc.assign(static_cast<std::size_t>(a.q_heads) * hd, 0.f);
  zero_sums.assign(static_cast<std::size_t>(a.q_heads) * value_groups, 0.f);
  denominators.resize(static_cast<std::size_t>(a.q_heads));
  auto row_of = [&](int kvh, int first, int h) { return static_cast<std::size_t>(kvh * gqa + first + h); };
  alignas(32) float scales[kMaxHeadDim], zeros[kMaxHeadDim], weights[H][kMaxHeadDim];
  const __m256 score_scale = _mm256_set1_ps(a.scale);

  // Each pass asks for the next group's bytes of a KV head while it works on this group's, a little
  // at a time: the block table scatters the groups, which the hardware prefetchers cannot foresee.
  const std::size_t head_bytes = s.head_group_bytes(), key_bytes = s.key_group_bytes();

  // K pass over the quantised groups.
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::uint8_t* group = range.group(g);
    for (int kvh = first_kv_head; kvh < end_kv_head; ++kvh) {
      const std::uint8_t* keys = group + static_cast<std::size_t>(kvh) * head_bytes;
      // (a channel's bytes of the next group at every channel of the first chunk below)
      const std::uint8_t* next_keys = g + 1 < groups ? range.head_part(g + 1, kvh) : nullptr;
      for (int c = 0; c < hd; ++c) scale_and_zero(keys + c * channel_bytes + channel_bytes - 4, scales[c], zeros[c]);
      for (int first = 0; first < gqa; first += H) {
        float constant[H];
        for (int h = 0; h < H; ++h) {
          const float* q = queries + row_of(kvh, first, h) * hd;
          __m256 zero_dot = _mm256_setzero_ps();
          for (int c = 0; c < hd; c += 8) {
            const __m256 qc = _mm256_loadu_ps(q + c);
            _mm256_store_ps(weights[h] + c, _mm256_mul_ps(qc, _mm256_load_ps(scales + c)));
            zero_dot = _mm256_fmadd_ps(qc, _mm256_load_ps(zeros + c), zero_dot);
          }
          constant[h] = horizontal_sum(zero_dot);
        }
        for (int chunk = 0; chunk < G; chunk += 16) {
          __m256 sum[H][2];
          for (int h = 0; h < H; ++h) sum[h][0] = sum[h][1] = _mm256_setzero_ps();
          const std::uint8_t* codes = keys + chunk * Bits / 8;
          const bool ask = next_keys && first == 0 && chunk == 0;
          for (int c = 0; c < hd; ++c, codes += channel_bytes) {
            if (ask) _mm_prefetch(reinterpret_cast<const char*>(next_keys + c * channel_bytes), _MM_HINT_T1);
            __m256 lo, hi;
            codes16<Bits>(codes, lo, hi);
            for (int h = 0; h < H; ++h) {
              const __m256 w = _mm256_broadcast_ss(&weights[h][c]);
              sum[h][0] = _mm256_fmadd_ps(w, lo, sum[h][0]);
              sum[h][1] = _mm256_fmadd_ps(w, hi, sum[h][1]);
            }
          }
          for (int h = 0; h < H; ++h) {
            const __m256 k = _mm256_set1_ps(constant[h]);
            float* out = scores.data() + row_of(kvh, first, h) * n + g * G + chunk;
            _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_add_ps(sum[h][0], k), score_scale));
            _mm256_storeu_ps(out + 8, _mm256_mul_ps(_mm256_add_ps(sum[h][1], k), score_scale));
          }
        }
      }
    }
  }
  // K pass over the residual's fp16 tokens.
  for (std::int64_t j = 0; j < n - quantized; ++j) {
    const std::uint8_t* token = range.residual(quantized, j);
    for (int kvh = first_kv_head; kvh < end_kv_head; ++kvh) {
      const std::uint8_t* k = token + static_cast<std::size_t>(kvh) * 4 * hd;  // K then V, hd halves each
      for (int first = 0; first < gqa; first += H) {
        __m256 sum[H][2];
        for (int h = 0; h < H; ++h) sum[h][0] = sum[h][1] = _mm256_setzero_ps();
        for (int c = 0; c < hd; c += 16) {
          const __m256 lo = load_halves(k + 2 * c), hi = load_halves(k + 2 * c + 16);
          for (int h = 0; h < H; ++h) {
            const float* q = queries + row_of(kvh, first, h) * hd + c;
            sum[h][0] = _mm256_fmadd_ps(_mm256_loadu_ps(q), lo, sum[h][0]);
            sum[h][1] = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8), hi, sum[h][1]);
          }
        }
        for (int h = 0; h < H; ++h)
          scores[row_of(kvh, first, h) * n + quantized + j] = horizontal_sum(_mm256_add_ps(sum[h][0], sum[h][1])) * a.scale;
      }
    }
  }
  const int first_row = first_kv_head * gqa, end_row = end_kv_head * gqa;  // the query heads of these KV heads
  for (int row = first_row; row < end_row; ++row)
    denominators[static_cast<std::size_t>(row)] = softmax_numerators(scores.data() + static_cast<std::size_t>(row) * n, static_cast<int>(n));

  // V pass over the quantised groups, in code space.
  // p_t scale_t: [token][value group][h], four lanes per entry whatever H (G x hd / G entries);
  // the group's probabilities token-major, [token][h].
  alignas(16) float token_weights[kMaxHeadDim * 4], probabilities[kMaxHeadDim][4] = {};
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::uint8_t* group = range.group(g);
    for (int kvh = first_kv_head; kvh < end_kv_head; ++kvh) {
      const std::uint8_t* values = group + static_cast<std::size_t>(kvh) * head_bytes + key_bytes;
      // (a token's bytes of the next group at every token of the first chunk below)
      const std::uint8_t* next_values = g + 1 < groups ? range.head_part(g + 1, kvh) + key_bytes : nullptr;
      for (int first = 0; first < gqa; first += H) {
        for (int h = 0; h < H; ++h) {
          const float* p = scores.data() + row_of(kvh, first, h) * n + g * G;
          for (int t = 0; t < G; ++t) probabilities[t][h] = p[t];
        }
        __m128 zero_sum[kMaxHeadDim / 16];  // per value group, the H heads' sum_t p_t zero_t in lanes
        for (int vg = 0; vg < value_groups; ++vg) zero_sum[vg] = _mm_setzero_ps();
        for (int t = 0; t < G; ++t) {
          const std::uint8_t* vector = values + static_cast<std::size_t>(t) * value_bytes;
          const __m128 p = _mm_load_ps(probabilities[t]);
          for (int vg = 0; vg < value_groups; ++vg) {
            float scale, zero;
            scale_and_zero(vector + vg * value_group_bytes + value_group_bytes - 4, scale, zero);
            _mm_store_ps(token_weights + (t * value_groups + vg) * 4, _mm_mul_ps(p, _mm_set1_ps(scale)));
            zero_sum[vg] = _mm_fmadd_ps(p, _mm_set1_ps(zero), zero_sum[vg]);
          }
        }
        for (int vg = 0; vg < value_groups; ++vg) {
          alignas(16) float lanes[4];
          _mm_store_ps(lanes, zero_sum[vg]);
          for (int h = 0; h < H; ++h) zero_sums[row_of(kvh, first, h) * value_groups + vg] += lanes[h];
        }
        for (int c = 0; c < hd; c += 16) {
          const int vg = c / G;
          const std::uint8_t* codes = values + vg * value_group_bytes + (c % G) * Bits / 8;
          __m256 sum[H][2];
          for (int h = 0; h < H; ++h) {
            const float* at = acc.data() + row_of(kvh, first, h) * hd + c;
            sum[h][0] = _mm256_loadu_ps(at);
            sum[h][1] = _mm256_loadu_ps(at + 8);
          }
          const bool ask = next_values && first == 0 && c == 0;
          for (int t = 0; t < G; ++t, codes += value_bytes) {
            if (ask) prefetch_l2(next_values + static_cast<std::size_t>(t) * value_bytes, value_bytes);
            __m256 lo, hi;
            codes16<Bits>(codes, lo, hi);
            for (int h = 0; h < H; ++h) {
              const __m256 w = _mm256_broadcast_ss(&token_weights[(t * value_groups + vg) * 4 + h]);
              sum[h][0] = _mm256_fmadd_ps(w, lo, sum[h][0]);
              sum[h][1] = _mm256_fmadd_ps(w, hi, sum[h][1]);
            }
          }
          for (int h = 0; h < H; ++h) {
            float* at = acc.data() + row_of(kvh, first, h) * hd + c;
            _mm256_storeu_ps(at, sum[h][0]);
            _mm256_storeu_ps(at + 8, sum[h][1]);
          }
        }
      }
    }
  }
  // V pass over the residual.
  for (std::int64_t j = 0; j < n - quantized; ++j) {
    const std::uint8_t* token = range.residual(quantized, j);
    for (int kvh = first_kv_head; kvh < end_kv_head; ++kvh) {
      const std::uint8_t* v = token + static_cast<std::size_t>(kvh) * 4 * hd + 2 * static_cast<std::size_t>(hd);
      for (int first = 0; first < gqa; first += H) {
        __m256 p[H];
        for (int h = 0; h < H; ++h) p[h] = _mm256_set1_ps(scores[row_of(kvh, first, h) * n + quantized + j]);
        for (int c = 0; c < hd; c += 16) {
          const __m256 lo = load_halves(v + 2 * c), hi = load_halves(v + 2 * c + 16);
          for (int h = 0; h < H; ++h) {
            float* at = acc.data() + row_of(kvh, first, h) * hd + c;
            _mm256_storeu_ps(at, _mm256_fmadd_ps(p[h], lo, _mm256_loadu_ps(at)));
            _mm256_storeu_ps(at + 8, _mm256_fmadd_ps(p[h], hi, _mm256_loadu_ps(at + 8)));
          }
        }
      }
    }
  }
  float* out = a.out + static_cast<std::size_t>(seq) * a.q_heads * hd;
  for (int row = first_row; row < end_row; ++row) {
    const float inv = 1.0f / denominators[static_cast<std::size_t>(row)];
    for (int c = 0; c < hd; ++c) {
      const std::size_t at = static_cast<std::size_t>(row) * hd + c;
      out[at] = (acc[at] + zero_sums[static_cast<std::size_t>(row) * value_groups + c / G]) * inv;
    }
  }
}

template <int Bits>
void attend_bits(const KiviDecodeArgs& a, int seq, int first, int end) {
  switch (const int gqa = a.q_heads / a.shape.kv_heads; gqa % 4 == 0 ? 4 : gqa % 3 == 0 ? 3 : gqa % 2 == 0 ? 2 : 1) {
    case 4: return attend<Bits, 4>(a, seq, first, end);
    case 3: return attend<Bits, 3>(a, seq, first, end);
    case 2: return attend<Bits, 2>(a, seq, first, end);
    default: return attend<Bits, 1>(a, seq, first, end);
  }
}

}  // namespace

bool kivi_avx2_takes(const KiviDecodeArgs& a) {
  const KiviPagedShape& s = a.shape;
  return s.group % 16 == 0 && s.head_dim % 16 == 0 && s.head_dim <= kMaxHeadDim && a.q_heads / s.kv_heads <= 8 &&
         (s.bits == 2 || s.bits == 4 || s.bits == 8);
}

void attend_kivi_avx2(const KiviDecodeArgs& a, int seq, int first_kv_head, int kv_heads) {
  const int end = first_kv_head + kv_heads;
  switch (a.shape.bits) {
    case 8: return attend_bits<8>(a, seq, first_kv_head, end);
    case 4: return attend_bits<4>(a, seq, first_kv_head, end);
    default: return attend_bits<2>(a, seq, first_kv_head, end);
  }
}

}  // namespace memtwin::kernels::simd

#else

namespace memtwin::kernels::simd {
bool kivi_avx2_takes(const KiviDecodeArgs&) { return false; }
void attend_kivi_avx2(const KiviDecodeArgs&, int, int, int) {}
}  // namespace memtwin::kernels::simd

#endif
