// Decode attention for x86-64 CPUs with AVX2, FMA and F16C (Haswell and later, every EPYC): the
// same arithmetic as the portable kernel in decode_attention.cpp, arranged for the vector units.
// This file alone is compiled with -mavx2 -mfma -mf16c; decode_attention() calls it only after
// checking the CPU (decode_attention_avx2_supported()), so the rest of the program stays baseline.
//
// Per sequence, a range of its KV heads at once (their vectors lie side by side in each token's
// row, so the passes read memory in order), and per KV head the GQA group's query heads share
// every K and V vector read:
//   K pass  one token at a time, the dot products of all the group's heads accumulated in
//           registers (fp16 widened 8 at a time by vcvtph2ps, e4m3 moved into fp16 bits first,
//           8- and 4-bit codes dequantised 8 at a time, 2-bit groups into a small buffer first);
//   softmax a vectorised exp;
//   V pass  tiles of tokens: the output is accumulated in registers 16 dimensions at a time
//           across each tile's vectors.
#include "kernels/cpu/decode_attention_simd.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/avx2_vectors.h"
#include "kernels/cpu/paged_rows.h"

namespace memtwin::kernels::simd {

namespace {

using namespace avx2;  // the register-level helpers written for these kernels

constexpr int kTile = 32;  // tokens of a V tile: a head's 32 vectors stay in L1 while its output accumulates

// Stores each of G heads' accumulated dot product (the lanes of acc[g]) times `scale` at
// scores[g * ctx + t].
template <int G>
void store_scores(const __m256* acc, float scale, int ctx, int t, float* scores) {
  if constexpr (G % 4 == 0) {
    for (int g = 0; g < G; g += 4) {
      alignas(16) float four[4];
      _mm_store_ps(four, horizontal_sums4(acc[g], acc[g + 1], acc[g + 2], acc[g + 3]));
      for (int i = 0; i < 4; ++i) scores[static_cast<std::size_t>(g + i) * ctx + t] = four[i] * scale;
    }
  } else {
    for (int g = 0; g < G; ++g) scores[static_cast<std::size_t>(g) * ctx + t] = horizontal_sum(acc[g]) * scale;
  }
}

// A quantisation group: its packed codes, then the fp16 scale and zero point behind them (both
// widened by one vcvtph2ps).
struct Group {
  const std::uint8_t* codes;
  float scale, zero;
};
Group group_at(const std::uint8_t* vector, const Layout& layout, int index) {
  const std::uint8_t* base = vector + static_cast<std::size_t>(index) * layout.group_bytes;
  Group group{base, 0.f, 0.f};
  scale_and_zero(base + layout.code_bytes, group.scale, group.zero);
  return group;
}

// One quantised vector into floats: code * scale + zero per group (bits 8, 4 or 2).
void dequantize(const std::uint8_t* in, const KvFormat& f, const Layout& layout, float* out) {
  for (int g = 0; g < layout.groups; ++g) {
    const Group group = group_at(in, layout, g);
    const std::uint8_t* base = group.codes;
    const __m256 scale = _mm256_set1_ps(group.scale);
    const __m256 zero = _mm256_set1_ps(group.zero);
    float* o = out + g * layout.group;
    if (f.bits() == 8) {
      for (int i = 0; i < layout.code_bytes; i += 8) _mm256_storeu_ps(o + i, _mm256_fmadd_ps(codes8(base + i), scale, zero));
    } else if (f.bits() == 4) {
      for (int i = 0; i < layout.code_bytes; i += 4) _mm256_storeu_ps(o + 2 * i, _mm256_fmadd_ps(codes4(base + i), scale, zero));
    } else {
      for (int i = 0; i < layout.code_bytes; ++i) {
        for (int k = 0; k < 4; ++k) o[4 * i + k] = static_cast<float>((base[i] >> (2 * k)) & 0x3) * group.scale + group.zero;
      }
    }
  }
}

constexpr int kAhead = 8;  // tokens the K pass prefetches ahead

// Eight elements of a floating-point vector (fp16, or e4m3 over 256) starting at element c.
__m256 load_floating(const std::uint8_t* vector, const KvFormat& f, int c) {
  return f.element == KvElement::fp8 ? load_e4m3_over_256(vector + c) : load_halves(vector + 2 * c);
}

// The K pass for G query heads: scores[g * ctx + t] = scale * q_g . k_t. Each token's vector is
// read 16 elements at a time (8- and 4-bit codes dequantised with one FMA per 8, shared by the G
// heads) and dotted with every head's query into two accumulators per head: one chain of FMAs per
// head is bound by the FMA's latency, not its throughput. (Eight heads have chains enough.)
template <int G, int Bits>
void key_scores_over(const DecodeAttentionArgs& a, const std::int32_t* table, const float* q, const Heads& heads, int ctx,
                     float* scores, float* buffer) {
  const KvFormat& f = a.shape.format;
  const Layout layout(a.shape);
  const int hd = f.head_dim;
  const std::size_t bytes = layout.vector_bytes;
  const float score_scale = a.scale * element_factor(f);
  constexpr int kChains = G >= 8 ? 1 : 2;
  Rows rows(a.k_cache, table, layout, heads.first, ctx, 0), ahead(a.k_cache, table, layout, heads.first, ctx, kAhead);
  for (int t = 0; t < ctx; ++t, rows.next(), ahead.next()) {
    const std::uint8_t* later = ahead.valid() ? ahead.row() : nullptr;
    const std::uint8_t* row = rows.row();
    for (int h = 0; h < heads.count; ++h) {
      // Each head asks for its own vector of the later row: spread over the token's work rather
      // than a whole row at once, the asks keep the misses flowing (fp16 at 8K on Zen 4: -11%).
      if (later) prefetch(later + static_cast<std::size_t>(h) * bytes, bytes);
      const std::uint8_t* k = row + static_cast<std::size_t>(h) * bytes;
      const float* q_h = q + static_cast<std::size_t>(h) * G * hd;
      float* scores_h = scores + static_cast<std::size_t>(h) * G * ctx;
      __m256 acc[kChains][G];
      for (int c = 0; c < kChains; ++c)
        for (int g = 0; g < G; ++g) acc[c][g] = _mm256_setzero_ps();
      auto dot16 = [&](const float* qc, __m256 lo, __m256 hi) {
        for (int g = 0; g < G; ++g) {
          acc[0][g] = _mm256_fmadd_ps(_mm256_loadu_ps(qc + g * hd), lo, acc[0][g]);
          acc[kChains - 1][g] = _mm256_fmadd_ps(_mm256_loadu_ps(qc + g * hd + 8), hi, acc[kChains - 1][g]);
        }
      };
      if constexpr (Bits == 8 || Bits == 4) {
        for (int gi = 0; gi < layout.groups; ++gi) {
          const Group group = group_at(k, layout, gi);
          const __m256 scale = _mm256_set1_ps(group.scale), zero = _mm256_set1_ps(group.zero);
          for (int c = 0; c < layout.group; c += 16) {
            __m256 lo, hi;
            if constexpr (Bits == 8) {
              lo = codes8(group.codes + c);
              hi = codes8(group.codes + c + 8);
            } else {
              codes4_split(group.codes + c / 2, lo, hi);  // the query is in the same even/odd order
            }
            dot16(q_h + gi * layout.group + c, _mm256_fmadd_ps(lo, scale, zero), _mm256_fmadd_ps(hi, scale, zero));
          }
        }
      } else if (f.quantized()) {  // 2 bits: dequantised whole first
        dequantize(k, f, layout, buffer);
        for (int c = 0; c < hd; c += 16) dot16(q_h + c, _mm256_load_ps(buffer + c), _mm256_load_ps(buffer + c + 8));
      } else {
        for (int c = 0; c < hd; c += 16) dot16(q_h + c, load_floating(k, f, c), load_floating(k, f, c + 8));
      }
      if constexpr (kChains == 2)
        for (int g = 0; g < G; ++g) acc[0][g] = _mm256_add_ps(acc[0][g], acc[1][g]);
      store_scores<G>(acc[0], score_scale, ctx, t, scores_h);
    }
  }
}

template <int G>
void key_scores(const DecodeAttentionArgs& a, const std::int32_t* table, const float* q, const Heads& heads, int ctx,
                float* scores, float* buffer) {
  const KvFormat& f = a.shape.format;
  const int hd = f.head_dim;
  if (f.quantized() && f.bits() == 8 && f.group % 16 == 0) return key_scores_over<G, 8>(a, table, q, heads, ctx, scores, buffer);
  if (f.quantized() && f.bits() == 4 && f.group % 16 == 0) {
    // The queries in codes4_split's order, so that each half of a chunk meets its codes.
    const int q_heads = G * heads.count;
    thread_local std::vector<float> reordered;
    reordered.resize(static_cast<std::size_t>(q_heads) * hd);
    for (int g = 0; g < q_heads; ++g)
      for (int c = 0; c < hd; c += 16)
        for (int j = 0; j < 16; ++j) reordered[static_cast<std::size_t>(g) * hd + c + even_odd_position(j)] = q[g * hd + c + j];
    return key_scores_over<G, 4>(a, table, reordered.data(), heads, ctx, scores, buffer);
  }
  key_scores_over<G, 0>(a, table, q, heads, ctx, scores, buffer);  // floating point, or dequantised first
}

// The V pass for G query heads of each KV head: out_g = sum_t p_g[t] v_t / denominator_g, tile by
// tile; a tile's vectors of all the heads are read in order. With Bits 8 or 4, values are
// accumulated in code space: per group, sum_t p_t (scale_t code_t + zero_t) = sum_t (p_t scale_t)
// code_t + sum_t p_t zero_t, so a token's codes are widened once and multiplied straight away, and
// its zero points fall into one scalar per group and head. Otherwise (fp16, e4m3, or 2-bit groups
// dequantised first) values are widened to floats.
template <int G, int Bits>
void weighted_values_over(const DecodeAttentionArgs& a, const std::int32_t* table, const Heads& heads, int ctx,
                          const float* p, const float* denominators, float* out, float* acc_store, float* tile_buffer) {
  constexpr bool kCodeSpace = Bits == 8 || Bits == 4;
  const KvFormat& f = a.shape.format;
  const Layout layout(a.shape);
  const int hd = f.head_dim, groups = layout.groups;
  const std::size_t bytes = layout.vector_bytes, span = bytes * static_cast<std::size_t>(heads.count);
  std::fill(acc_store, acc_store + static_cast<std::size_t>(heads.count) * G * hd, 0.f);
  thread_local std::vector<float> zero_store;  // code space: sum_t p_t zero_t, [head][group][g]
  zero_store.assign(static_cast<std::size_t>(heads.count) * groups * G, 0.f);
  alignas(32) float weights[kTile][16][G];     // code space: p_t scale_t, [token][group][g] (<= 16 groups)
  alignas(32) float probs[kTile][G];           // the tile's probabilities, token-major
  const std::uint8_t* rows[kTile];
  const std::uint8_t* later[kTile];  // the next tile's rows, which each head prefetches its vectors of
  Rows current(a.v_cache, table, layout, heads.first, ctx, 0), ahead(a.v_cache, table, layout, heads.first, ctx, 0);
  for (int t = 0; t < std::min(kTile, ctx); ++t, ahead.next()) prefetch(ahead.row(), span);
  for (int t0 = 0; t0 < ctx; t0 += kTile) {
    const int n = std::min(kTile, ctx - t0);
    int later_count = 0;
    for (int j = 0; j < n; ++j, current.next()) {
      rows[j] = current.row();
      if (ahead.valid()) {
        later[later_count++] = ahead.row();
        ahead.next();
      }
    }
    for (int h = 0; h < heads.count; ++h) {
      const float* p_h = p + static_cast<std::size_t>(h) * G * ctx + t0;
      float* acc_h = acc_store + static_cast<std::size_t>(h) * G * hd;
      const std::size_t at = static_cast<std::size_t>(h) * bytes;  // the head's vector within a row
      // The next tile, while this one computes: each head asks for its own vectors (as the K pass does).
      for (int j = 0; j < later_count; ++j) prefetch_l2(later[j] + at, bytes);
      for (int j = 0; j < n; ++j)
        for (int g = 0; g < G; ++g) probs[j][g] = p_h[static_cast<std::size_t>(g) * ctx + j];
      if constexpr (kCodeSpace) {
        float* zero_sums = zero_store.data() + static_cast<std::size_t>(h) * groups * G;
        for (int j = 0; j < n; ++j) {
          for (int gi = 0; gi < groups; ++gi) {
            const Group group = group_at(rows[j] + at, layout, gi);
            for (int g = 0; g < G; ++g) {
              weights[j][gi][g] = probs[j][g] * group.scale;
              zero_sums[gi * G + g] += probs[j][g] * group.zero;
            }
          }
        }
      } else if (f.quantized()) {
        for (int j = 0; j < n; ++j) dequantize(rows[j] + at, f, layout, tile_buffer + static_cast<std::size_t>(j) * hd);
      }
      // 16 dimensions at a time: 2 G accumulators in registers across the tile's tokens (int4: the
      // chunk's even dimensions in the first, its odd ones in the second).
      for (int c = 0; c < hd; c += 16) {
        __m256 acc[G][2];
        for (int g = 0; g < G; ++g) {
          acc[g][0] = _mm256_loadu_ps(acc_h + g * hd + c);
          acc[g][1] = _mm256_loadu_ps(acc_h + g * hd + c + 8);
        }
        if constexpr (kCodeSpace) {
          const int gi = c / layout.group, within = c % layout.group;
          const std::size_t codes_at = at + static_cast<std::size_t>(gi) * layout.group_bytes + (Bits == 8 ? within : within / 2);
          for (int j = 0; j < n; ++j) {
            __m256 v0, v1;
            if constexpr (Bits == 8) {
              v0 = codes8(rows[j] + codes_at);
              v1 = codes8(rows[j] + codes_at + 8);
            } else {
              codes4_split(rows[j] + codes_at, v0, v1);
            }
            for (int g = 0; g < G; ++g) {
              const __m256 w = _mm256_broadcast_ss(&weights[j][gi][g]);
              acc[g][0] = _mm256_fmadd_ps(w, v0, acc[g][0]);
              acc[g][1] = _mm256_fmadd_ps(w, v1, acc[g][1]);
            }
          }
        } else {
          for (int j = 0; j < n; ++j) {
            __m256 v0, v1;
            if (f.quantized()) {
              v0 = _mm256_load_ps(tile_buffer + static_cast<std::size_t>(j) * hd + c);
              v1 = _mm256_load_ps(tile_buffer + static_cast<std::size_t>(j) * hd + c + 8);
            } else {
              v0 = load_floating(rows[j] + at, f, c);
              v1 = load_floating(rows[j] + at, f, c + 8);
            }
            for (int g = 0; g < G; ++g) {
              const __m256 w = _mm256_broadcast_ss(&probs[j][g]);
              acc[g][0] = _mm256_fmadd_ps(w, v0, acc[g][0]);
              acc[g][1] = _mm256_fmadd_ps(w, v1, acc[g][1]);
            }
          }
        }
        for (int g = 0; g < G; ++g) {
          _mm256_storeu_ps(acc_h + g * hd + c, acc[g][0]);
          _mm256_storeu_ps(acc_h + g * hd + c + 8, acc[g][1]);
        }
      }
    }
  }
  for (int head = 0; head < G * heads.count; ++head) {  // the query heads, in order
    const int h = head / G, g = head % G;
    const float inv = element_factor(f) / denominators[head];
    for (int c = 0; c < hd; ++c) {
      const int chunk = c - c % 16;
      float sum = acc_store[head * hd + (Bits == 4 ? chunk + even_odd_position(c % 16) : c)];
      if constexpr (kCodeSpace) sum += zero_store[(static_cast<std::size_t>(h) * groups + c / layout.group) * G + g];
      out[head * hd + c] = sum * inv;
    }
  }
}

template <int G>
void weighted_values(const DecodeAttentionArgs& a, const std::int32_t* table, const Heads& heads, int ctx, const float* p,
                     const float* denominators, float* out, float* acc_store, float* tile_buffer) {
  const KvFormat& f = a.shape.format;
  if (f.quantized() && f.group % 16 == 0 && f.bits() == 8)
    return weighted_values_over<G, 8>(a, table, heads, ctx, p, denominators, out, acc_store, tile_buffer);
  if (f.quantized() && f.group % 16 == 0 && f.bits() == 4)
    return weighted_values_over<G, 4>(a, table, heads, ctx, p, denominators, out, acc_store, tile_buffer);
  weighted_values_over<G, 0>(a, table, heads, ctx, p, denominators, out, acc_store, tile_buffer);
}

template <int G>
void attend(const DecodeAttentionArgs& a, int seq, const Heads& heads) {
  const int hd = a.shape.format.head_dim;
  const int ctx = a.context_lens[seq];
  const int q_heads = G * heads.count;  // the query heads of these KV heads, consecutive
  thread_local std::vector<float> scores, acc, buffer;
  scores.resize(static_cast<std::size_t>(q_heads) * ctx);
  acc.resize(static_cast<std::size_t>(q_heads) * hd);
  buffer.resize(static_cast<std::size_t>(kTile) * hd + 8);
  float* aligned = buffer.data() + ((32 - reinterpret_cast<std::uintptr_t>(buffer.data()) % 32) % 32) / sizeof(float);
  const float* q = a.query + (static_cast<std::size_t>(seq) * a.q_heads + heads.first * G) * hd;
  const std::int32_t* table = a.block_tables + static_cast<std::size_t>(seq) * a.max_blocks_per_seq;
  key_scores<G>(a, table, q, heads, ctx, scores.data(), aligned);
  thread_local std::vector<float> denominators;
  denominators.resize(static_cast<std::size_t>(q_heads));
  for (int g = 0; g < q_heads; ++g) denominators[g] = softmax_numerators(scores.data() + static_cast<std::size_t>(g) * ctx, ctx);
  write_probabilities(a, seq, heads.first * G, q_heads, scores.data(), denominators.data());
  if (!a.out) return;
  float* out = a.out + (static_cast<std::size_t>(seq) * a.q_heads + heads.first * G) * hd;
  weighted_values<G>(a, table, heads, ctx, scores.data(), denominators.data(), out, acc.data(), aligned);
}

}  // namespace

bool attend_heads_avx2(const DecodeAttentionArgs& a, int seq, int first_kv_head, int kv_heads) {
  const KvFormat& f = a.shape.format;
  if (f.head_dim % 16 != 0 || f.head_dim > 256 || (f.quantized() && (f.group % 8 != 0 || f.groups() > 16))) return false;
  const Heads heads{first_kv_head, kv_heads};
  switch (a.q_heads / a.shape.kv_heads) {
    case 1: attend<1>(a, seq, heads); return true;
    case 2: attend<2>(a, seq, heads); return true;
    case 4: attend<4>(a, seq, heads); return true;
    case 8: attend<8>(a, seq, heads); return true;
    default: return false;
  }
}

}  // namespace memtwin::kernels::simd

#else

namespace memtwin::kernels::simd {
bool attend_heads_avx2(const DecodeAttentionArgs&, int, int, int) { return false; }
}  // namespace memtwin::kernels::simd

#endif
