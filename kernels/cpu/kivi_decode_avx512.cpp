// KIVI decode attention for x86-64 CPUs with AVX-512 (F, BW, VL, DQ), FMA and F16C: the AVX2
// kernel's arrangement (kivi_decode_avx2.cpp) in 16-lane vectors. This file alone is compiled for
// AVX-512; kivi_decode_attention() calls it only on CPUs that have it.
//
// Per sequence (or a range of its KV heads), its memory read in order, and per KV head up to eight
// query heads of its GQA group at once:
//   K pass  a key group's scores from its codes, 32 tokens at a time in two registers:
//           q.k_t = sum_c (q_c scale_c) code_ct + sum_c q_c zero_c; the weights q_c scale_c are
//           formed once per group and head (the channels' scales and zero points gathered 16 at a
//           time), then each channel's 32 codes are widened once and multiplied into every head's
//           two accumulators (with VNNI, 4- and 8-bit keys: the weights rounded to 16 bits, two
//           channels' codes a lane, kivi_vnni_keys.cpp);
//   softmax a vectorised exp;
//   V pass  in code space, sum_t p_t (scale_t code_t + zero_t) = sum_t (p_t scale_t) code_t +
//           sum_t p_t zero_t, 32 channels at a time accumulated in registers across a group's
//           tokens; the weights p_t scale_t of a group's tokens formed 16 tokens at a time (with
//           VNNI: rounded to 16 bits per tile, vnni_weigh_tile).
// Codes are widened in the order cheapest to unpack (4-bit: even elements, then odd ones; 2-bit:
// elements 4i, 4i + 1, 4i + 2, 4i + 3 apart): scores are put back in token order per chunk, the
// outputs in channel order once at the end. The residual's fp16 tokens take plain dot products and
// weighted sums.
#include "kernels/cpu/decode_attention_simd.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__) && defined(__FMA__) && defined(__F16C__)

#include <algorithm>
#include <limits>
#include <vector>

#include "kernels/cpu/avx512_vectors.h"
#include "kernels/cpu/kivi_sequence_range.h"

namespace memtwin::kernels::simd {

namespace {

using namespace avx512;  // the register-level helpers written for the AVX-512 kernels

constexpr int kMaxHeadDim = 256;
constexpr int kChunk = 32;  // tokens of a key group, channels of a value group, widened at a time

// Thirty-two Bits-bit codes packed lowest bits first (element e at bit Bits * e), widened into two
// vectors in the order position<Bits> gives.
template <int Bits>
inline void codes32(const std::uint8_t* p, __m512& first, __m512& second) {
  if constexpr (Bits == 8) {
    first = codes8(p);
    second = codes8(p + kLanes);
  } else if constexpr (Bits == 4) {
    first = codes4<false>(p);
    second = codes4<true>(p);
  } else {  // 2 bits: eight bytes, each byte's four codes apart
    std::int64_t word;
    std::memcpy(&word, p, 8);
    const __m512i bytes = _mm512_cvtepu8_epi32(_mm_set1_epi64x(word));  // bytes 0-7, twice
    const __m512i mask = _mm512_set1_epi32(3);
    first = _mm512_cvtepi32_ps(
        _mm512_and_si512(_mm512_srlv_epi32(bytes, _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2)), mask));
    second = _mm512_cvtepi32_ps(
        _mm512_and_si512(_mm512_srlv_epi32(bytes, _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6)), mask));
  }
}

// Where element e (< 32) of codes32's widening sits among its 32 lanes (first's, then second's).
template <int Bits>
constexpr int position(int e) {
  if constexpr (Bits == 8) return e;
  if constexpr (Bits == 4) return codes4_position(e);
  const int k = e % 4, byte = e / 4;  // 2 bits: byte `byte`, bits 2k
  return (k / 2) * kLanes + (k % 2) * 8 + byte;
}

// acc + x times the float at w, broadcast from memory inside the instruction: GCC 12 spends a
// separate broadcast on each weight instead.
inline __m512 fma_broadcast(__m512 acc, __m512 x, const float* w) {
  asm("vfmadd231ps %[w]%{1to16%}, %[x], %[acc]" : [acc] "+v"(acc) : [x] "v"(x), [w] "m"(*w));
  return acc;
}

// Sixteen fp16 scale/zero pairs at `p`, `p + stride`, ...: their scales and zero points as floats.
inline void gather_scales(const std::uint8_t* p, __m512i offsets, float* scales, float* zeros) {
  __m512 scale, zero;
  scales_and_zeros(_mm512_i32gather_epi32(offsets, p, 1), scale, zero);
  _mm512_storeu_ps(scales, scale);
  _mm512_storeu_ps(zeros, zero);
}

// Sixteen records of `words` 32-bit words each, one after another from p: each record's last word
// (a key channel's fp16 scale and zero point after its codes). Records of at most eight words are
// loaded whole (the words bytes of the sixteen) and their last words picked with permutes, two
// registers at a time; longer ones are gathered (a load per lane).
class LastWords {
 public:
  explicit LastWords(int words) : words_(words) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i last = _mm512_add_epi32(_mm512_mullo_epi32(lane, _mm512_set1_epi32(words)), _mm512_set1_epi32(words - 1));
    offsets_ = _mm512_slli_epi32(last, 2);
    for (int m = 0; m < kPairs && 2 * m < words; ++m) {
      const __m512i from = _mm512_set1_epi32(32 * m);
      index_[m] = _mm512_sub_epi32(last, from);
      mask_[m] = _mm512_cmpge_epi32_mask(last, from) & _mm512_cmplt_epi32_mask(last, _mm512_add_epi32(from, _mm512_set1_epi32(32)));
    }
  }
  [[nodiscard]] __m512i operator()(const std::uint8_t* p) const {
    if (words_ > 2 * kPairs) return _mm512_i32gather_epi32(offsets_, p, 1);
    __m512i out = _mm512_setzero_si512();
    for (int m = 0; 2 * m < words_; ++m) {
      const __m512i low = _mm512_loadu_si512(p + 128 * m);
      const __m512i high = 2 * m + 1 < words_ ? _mm512_loadu_si512(p + 128 * m + 64) : low;
      out = _mm512_mask_mov_epi32(out, mask_[m], _mm512_permutex2var_epi32(low, index_[m], high));
    }
    return out;
  }

 private:
  static constexpr int kPairs = 4;  // of registers: records up to eight words
  int words_;
  __m512i offsets_, index_[kPairs];
  __mmask16 mask_[kPairs] = {};
};

// One sequence's KV heads [first_kv_head, end_kv_head): see the file's comment. H query heads of a
// KV head at a time (H divides the GQA group).
template <int Bits, int H>
void attend(const KiviDecodeArgs& a, int seq, int first_kv_head, int end_kv_head, bool vnni) {
  const KiviPagedShape& s = a.shape;
  const int hd = s.head_dim, G = s.group, gqa = a.q_heads / s.kv_heads;
  const std::int64_t n = a.context_lens[seq], quantized = s.quantized_tokens(n), groups = quantized / G;
  const std::size_t key_bytes = s.key_group_bytes(), head_bytes = s.head_group_bytes();  // a KV head's keys; its keys and values
  const std::size_t channel_bytes = key_bytes / static_cast<std::size_t>(hd);  // a key channel: G codes, scale, zero
  const KvFormat value_format = s.value_format();
  const std::size_t value_bytes = value_format.vector_bytes();
  const int value_groups = value_format.groups(), value_group_bytes = value_format.group_bytes();
  const KiviSequenceRange range{s, a.block_tables + static_cast<std::size_t>(seq) * a.max_blocks_per_seq,
                                const_cast<std::uint8_t*>(a.cache)};
  const float* queries = a.query + static_cast<std::size_t>(seq) * a.q_heads * hd;  // [q_heads][hd]
  // acc: the quantised groups' weighted codes, each 32 channels in codes32's order; residual: the
  // residual's weighted values in channel order; zero_sums: [row][value group][lane].
  thread_local std::vector<float> scores, acc, residual, zero_sums, denominators, token_weights;
  scores.resize(static_cast<std::size_t>(a.q_heads) * n);
  acc.assign(static_cast<std::size_t>(a.q_heads) * hd, 0.f);
  residual.assign(static_cast<std::size_t>(a.q_heads) * hd, 0.f);
  zero_sums.assign(static_cast<std::size_t>(a.q_heads) * value_groups * kLanes, 0.f);
  denominators.resize(static_cast<std::size_t>(a.q_heads));
  token_weights.resize(static_cast<std::size_t>(value_groups) * H * G);  // p_t scale_t, [value group][h][t]
  auto row_of = [&](int kvh, int first, int h) { return static_cast<std::size_t>(kvh * gqa + first + h); };
  alignas(64) float scales[kMaxHeadDim], zeros[kMaxHeadDim], weights[H][kMaxHeadDim];
  alignas(64) std::int32_t in_order[2][kLanes];
  for (int l = 0; l < kLanes; ++l) {
    in_order[0][l] = position<Bits>(l);
    in_order[1][l] = position<Bits>(kLanes + l);
  }
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const LastWords channel_words(static_cast<int>(channel_bytes / 4));  // a channel's scale and zero point
  const __m512i token_offsets = _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int>(value_bytes)));
  const __m512 score_scale = _mm512_set1_ps(a.scale);

  // Each pass asks for the next group's bytes of a KV head while it works on this group's, a little
  // at a time: the block table scatters the groups, which the hardware prefetchers cannot foresee.

  // K pass over the quantised groups: in integers (kivi_vnni_key_scores), or in floating point.
  const bool integer_keys = vnni && kivi_vnni_keys_take(s, H);
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::uint8_t* group = range.group(g);
    for (int kvh = first_kv_head; kvh < end_kv_head; ++kvh) {
      const std::uint8_t* keys = group + static_cast<std::size_t>(kvh) * head_bytes;
      // (a channel's bytes of the next group at every channel of the first pass below)
      const std::uint8_t* next_keys = g + 1 < groups ? range.head_part(g + 1, kvh) : nullptr;
      for (int c = 0; c < hd; c += kLanes) {
        __m512 scale, zero;
        scales_and_zeros(channel_words(keys + c * channel_bytes), scale, zero);
        _mm512_store_ps(scales + c, scale);
        _mm512_store_ps(zeros + c, zero);
      }
      for (int first = 0; first < gqa; first += H) {
        float constant[H];
        for (int h = 0; h < H; ++h) {
          const float* q = queries + row_of(kvh, first, h) * hd;
          __m512 zero_dot = _mm512_setzero_ps();
          for (int c = 0; c < hd; c += kLanes) {
            const __m512 qc = _mm512_loadu_ps(q + c);
            _mm512_store_ps(weights[h] + c, _mm512_mul_ps(qc, _mm512_load_ps(scales + c)));
            zero_dot = _mm512_fmadd_ps(qc, _mm512_load_ps(zeros + c), zero_dot);
          }
          constant[h] = _mm512_reduce_add_ps(zero_dot);
        }
        if (integer_keys) {
          KiviKeyGroup kg;
          kg.keys = keys;
          kg.channel_bytes = channel_bytes;
          kg.next_keys = first == 0 ? next_keys : nullptr;
          kg.weights = weights[0];
          kg.weights_stride = kMaxHeadDim;
          kg.constants = constant;
          kg.scores = scores.data() + row_of(kvh, first, 0) * n + g * G;
          kg.scores_stride = static_cast<std::size_t>(n);
          kg.scale = a.scale;
          kivi_vnni_key_scores(s, H, kg);
          continue;
        }
        for (int chunk = 0; chunk < G; chunk += kChunk) {
          __m512 sum[H][2];
          for (int h = 0; h < H; ++h) sum[h][0] = sum[h][1] = _mm512_setzero_ps();
          const std::uint8_t* codes = keys + chunk * Bits / 8;
          const bool ask = next_keys && first == 0 && chunk == 0;
          for (int c = 0; c < hd; ++c, codes += channel_bytes) {
            if (ask) _mm_prefetch(reinterpret_cast<const char*>(next_keys + c * channel_bytes), _MM_HINT_T1);
            __m512 x0, x1;
            codes32<Bits>(codes, x0, x1);
            for (int h = 0; h < H; ++h) {
              sum[h][0] = fma_broadcast(sum[h][0], x0, &weights[h][c]);
              sum[h][1] = fma_broadcast(sum[h][1], x1, &weights[h][c]);
            }
          }
          for (int h = 0; h < H; ++h) {
            const __m512 k = _mm512_set1_ps(constant[h]);
            const __m512 early = _mm512_permutex2var_ps(sum[h][0], _mm512_load_si512(in_order[0]), sum[h][1]);
            const __m512 late = _mm512_permutex2var_ps(sum[h][0], _mm512_load_si512(in_order[1]), sum[h][1]);
            float* out = scores.data() + row_of(kvh, first, h) * n + g * G + chunk;
            _mm512_storeu_ps(out, _mm512_mul_ps(_mm512_add_ps(early, k), score_scale));
            _mm512_storeu_ps(out + kLanes, _mm512_mul_ps(_mm512_add_ps(late, k), score_scale));
          }
        }
      }
    }
  }
  // K pass over the residual's fp16 tokens, two at a time where there are two: each score's sum in
  // the channels' order as alone, twice the sums in flight (one token's H sums were a chain of
  // multiply-adds, each waiting for the one before).
  const std::int64_t residual_tokens = n - quantized;
  for (std::int64_t j = 0; j < residual_tokens; j += 2) {
    const int tokens = residual_tokens - j >= 2 ? 2 : 1;
    const std::uint8_t* token[2] = {range.residual(quantized, j), range.residual(quantized, j + tokens - 1)};
    for (int kvh = first_kv_head; kvh < end_kv_head; ++kvh) {
      const std::size_t head_at = static_cast<std::size_t>(kvh) * 4 * hd;  // K then V, hd halves each
      for (int first = 0; first < gqa; first += H) {
        __m512 sum[2][H];
        for (auto& t : sum)
          for (__m512& x : t) x = _mm512_setzero_ps();
        for (int c = 0; c < hd; c += kLanes) {
          const __m512 kc[2] = {load_halves(token[0] + head_at, c), load_halves(token[1] + head_at, c)};
          for (int h = 0; h < H; ++h) {
            const __m512 qc = _mm512_loadu_ps(queries + row_of(kvh, first, h) * hd + c);
            for (int t = 0; t < 2; ++t) sum[t][h] = _mm512_fmadd_ps(qc, kc[t], sum[t][h]);
          }
        }
        for (int t = 0; t < tokens; ++t)
          for (int h = 0; h < H; ++h) scores[row_of(kvh, first, h) * n + quantized + j + t] = _mm512_reduce_add_ps(sum[t][h]) * a.scale;
      }
    }
  }
  const int first_row = first_kv_head * gqa, end_row = end_kv_head * gqa;  // the query heads of these KV heads
  for (int row = first_row; row < end_row; ++row)
    softmax<1>(scores.data() + static_cast<std::size_t>(row) * n, static_cast<int>(n), &denominators[static_cast<std::size_t>(row)]);

  // V pass over the quantised groups, in code space: in integers, tile by tile (VnniValueTile; the
  // group's tokens' vectors lie one after another), or in floating point.
  vnni = vnni && Bits != 2 && G % kIntegerWeightTile == 0 && vnni_value_tile_takes(value_format, H);
  if (vnni) {
    // A tile's tokens lie one after another: its asks for the lines of a token's bytes (prefetch_l2)
    // are spaced by those lines.
    const std::size_t ask_bytes = (value_bytes + 63) / 64 * 64;
    const int asks = static_cast<int>(std::min<std::size_t>(kIntegerWeightTile, (kIntegerWeightTile * value_bytes + ask_bytes - 1) / ask_bytes + 1));
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::uint8_t* group = range.group(g);
      for (int kvh = first_kv_head; kvh < end_kv_head; ++kvh) {
        const std::uint8_t* values = group + static_cast<std::size_t>(kvh) * head_bytes + key_bytes;
        const std::uint8_t* next_values = g + 1 < groups ? range.head_part(g + 1, kvh) + key_bytes : nullptr;
        const std::uint8_t* rows[kIntegerWeightTile];
        const std::uint8_t* next_rows[kIntegerWeightTile];  // the next group's tile, each cache line asked once
        for (int t0 = 0; t0 < G; t0 += kIntegerWeightTile) {
          for (int j = 0; j < kIntegerWeightTile; ++j) {
            rows[j] = values + static_cast<std::size_t>(t0 + j) * value_bytes;
            if (next_values && j < asks) next_rows[j] = next_values + static_cast<std::size_t>(t0) * value_bytes + j * ask_bytes;
          }
          for (int first = 0; first < gqa; first += H) {
            VnniValueTile tile;
            tile.rows = rows;
            tile.tokens = kIntegerWeightTile;
            tile.probs = scores.data() + row_of(kvh, first, 0) * n + g * G + t0;
            tile.probs_stride = static_cast<std::size_t>(n);
            tile.zero_sums = zero_sums.data() + row_of(kvh, first, 0) * value_groups * kLanes;
            tile.acc = acc.data() + row_of(kvh, first, 0) * hd;
            tile.prefetch = next_rows;
            tile.prefetch_count = next_values && first == 0 ? asks : 0;
            vnni_weigh_tile(value_format, H, tile);
          }
        }
      }
    }
  } else {
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::uint8_t* group = range.group(g);
      for (int kvh = first_kv_head; kvh < end_kv_head; ++kvh) {
        const std::uint8_t* values = group + static_cast<std::size_t>(kvh) * head_bytes + key_bytes;
        // (a token's bytes of the next group at every token of the first chunk below)
        const std::uint8_t* next_values = g + 1 < groups ? range.head_part(g + 1, kvh) + key_bytes : nullptr;
        for (int first = 0; first < gqa; first += H) {
          // The group's weights p_t scale_t and zero sums, 16 tokens at a time.
          for (int vg = 0; vg < value_groups; ++vg) {
            for (int t0 = 0; t0 < G; t0 += kLanes) {
              alignas(64) float scale[kLanes], zero[kLanes];
              gather_scales(values + static_cast<std::size_t>(t0) * value_bytes + static_cast<std::size_t>(vg) * value_group_bytes +
                                value_group_bytes - 4,
                            token_offsets, scale, zero);
              for (int h = 0; h < H; ++h) {
                const std::size_t row = row_of(kvh, first, h);
                const __m512 p = _mm512_loadu_ps(scores.data() + row * n + g * G + t0);
                _mm512_storeu_ps(token_weights.data() + (static_cast<std::size_t>(vg) * H + h) * G + t0,
                                 _mm512_mul_ps(p, _mm512_load_ps(scale)));
                float* z = zero_sums.data() + (row * value_groups + vg) * kLanes;
                _mm512_storeu_ps(z, _mm512_fmadd_ps(p, _mm512_load_ps(zero), _mm512_loadu_ps(z)));
              }
            }
          }
          for (int c = 0; c < hd; c += kChunk) {
            const int vg = c / G;
            const std::uint8_t* codes = values + vg * value_group_bytes + (c % G) * Bits / 8;
            const float* w = token_weights.data() + static_cast<std::size_t>(vg) * H * G;  // [h][t]
            __m512 sum[H][2];
            for (int h = 0; h < H; ++h) {
              const float* at = acc.data() + row_of(kvh, first, h) * hd + c;
              sum[h][0] = _mm512_loadu_ps(at);
              sum[h][1] = _mm512_loadu_ps(at + kLanes);
            }
            const bool ask = next_values && first == 0 && c == 0;
            for (int t = 0; t < G; ++t, codes += value_bytes) {
              if (ask) prefetch_l2(next_values + t * value_bytes, value_bytes);
              __m512 x0, x1;
              codes32<Bits>(codes, x0, x1);
              for (int h = 0; h < H; ++h) {
                const __m512 wt = _mm512_set1_ps(w[h * G + t]);
                sum[h][0] = _mm512_fmadd_ps(wt, x0, sum[h][0]);
                sum[h][1] = _mm512_fmadd_ps(wt, x1, sum[h][1]);
              }
            }
            for (int h = 0; h < H; ++h) {
              float* at = acc.data() + row_of(kvh, first, h) * hd + c;
              _mm512_storeu_ps(at, sum[h][0]);
              _mm512_storeu_ps(at + kLanes, sum[h][1]);
            }
          }
        }
      }
    }
  }

  // V pass over the residual: 32 channels of H heads at a time (where head_dim allows, else 16)
  // summed over its tokens in registers, each sum adding the tokens in order. (Token by token, every
  // sum was loaded and stored again for every token.)
  thread_local std::vector<const std::uint8_t*> residual_values;
  residual_values.resize(static_cast<std::size_t>(residual_tokens));
  for (std::int64_t j = 0; j < residual_tokens; ++j) residual_values[j] = range.residual(quantized, j) + 2 * static_cast<std::size_t>(hd);
  for (int kvh = first_kv_head; kvh < end_kv_head; ++kvh) {
    const std::size_t head_at = static_cast<std::size_t>(kvh) * 4 * hd;  // K then V, hd halves each
    for (int first = 0; first < gqa; first += H) {
      const float* p[H];
      for (int h = 0; h < H; ++h) p[h] = scores.data() + row_of(kvh, first, h) * n + quantized;
      for (int c = 0; c < hd; c += 2 * kLanes) {
        const int parts = c + 2 * kLanes <= hd ? 2 : 1;
        __m512 sum[2][H];
        for (auto& part : sum)
          for (__m512& x : part) x = _mm512_setzero_ps();
        for (std::int64_t j = 0; j < residual_tokens; ++j) {
          const __m512 vc[2] = {load_halves(residual_values[j] + head_at, c),
                                load_halves(residual_values[j] + head_at, c + (parts - 1) * kLanes)};
          for (int h = 0; h < H; ++h) {
            const __m512 p_hj = _mm512_set1_ps(p[h][j]);
            for (int part = 0; part < 2; ++part) sum[part][h] = _mm512_fmadd_ps(p_hj, vc[part], sum[part][h]);
          }
        }
        for (int part = 0; part < parts; ++part)
          for (int h = 0; h < H; ++h) _mm512_storeu_ps(residual.data() + row_of(kvh, first, h) * hd + c + part * kLanes, sum[part][h]);
      }
    }
  }
  float* out = a.out + static_cast<std::size_t>(seq) * a.q_heads * hd;
  int where[kMaxHeadDim];  // channel c's place in an acc row
  for (int c = 0; c < hd; ++c) where[c] = vnni ? vnni_value_position(value_format, c) : c - c % kChunk + position<Bits>(c % kChunk);
  for (int row = first_row; row < end_row; ++row) {
    const float inv = 1.0f / denominators[static_cast<std::size_t>(row)];
    float zero_sum[kMaxHeadDim / kChunk];
    for (int vg = 0; vg < value_groups; ++vg)
      zero_sum[vg] = _mm512_reduce_add_ps(_mm512_loadu_ps(zero_sums.data() + (static_cast<std::size_t>(row) * value_groups + vg) * kLanes));
    for (int c = 0; c < hd; ++c) {
      const std::size_t at = static_cast<std::size_t>(row) * hd;
      const float coded = acc[at + static_cast<std::size_t>(where[c])];
      out[at + c] = (coded + zero_sum[c / G] + residual[at + c]) * inv;
    }
  }
}

template <int Bits>
void attend_bits(const KiviDecodeArgs& a, int seq, int first, int end, bool vnni) {
  switch (const int gqa = a.q_heads / a.shape.kv_heads; gqa == 8 ? 8 : gqa % 4 == 0 ? 4 : gqa % 3 == 0 ? 3 : gqa % 2 == 0 ? 2 : 1) {
    case 8: return attend<Bits, 8>(a, seq, first, end, vnni);
    case 4: return attend<Bits, 4>(a, seq, first, end, vnni);
    case 3: return attend<Bits, 3>(a, seq, first, end, vnni);
    case 2: return attend<Bits, 2>(a, seq, first, end, vnni);
    default: return attend<Bits, 1>(a, seq, first, end, vnni);
  }
}

}  // namespace

bool kivi_avx512_takes(const KiviDecodeArgs& a) {
  const KiviPagedShape& s = a.shape;
  return s.group % kChunk == 0 && s.head_dim % kChunk == 0 && s.head_dim <= kMaxHeadDim && a.q_heads / s.kv_heads <= 8 &&
         (s.bits == 2 || s.bits == 4 || s.bits == 8);
}

void attend_kivi_avx512(const KiviDecodeArgs& a, int seq, int first_kv_head, int kv_heads, bool vnni) {
  const int end = first_kv_head + kv_heads;
  switch (a.shape.bits) {
    case 8: return attend_bits<8>(a, seq, first_kv_head, end, vnni);
    case 4: return attend_bits<4>(a, seq, first_kv_head, end, vnni);
    default: return attend_bits<2>(a, seq, first_kv_head, end, false);
  }
}

}  // namespace memtwin::kernels::simd

#else

namespace memtwin::kernels::simd {
bool kivi_avx512_takes(const KiviDecodeArgs&) { return false; }
void attend_kivi_avx512(const KiviDecodeArgs&, int, int, int, bool) {}
}  // namespace memtwin::kernels::simd

#endif
