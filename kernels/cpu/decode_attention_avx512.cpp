// Decode attention for x86-64 CPUs with AVX-512 (F, BW, VL, DQ), FMA and F16C: EPYC Zen 4 and
// later, Xeon Skylake-SP and later. The arithmetic of the portable kernel, arranged so that each
// instruction does sixteen lanes' work and the 32 vector registers hold a whole block of results.
// This file alone is compiled for AVX-512; decode_attention() calls it only on CPUs that have it.
//
// Per sequence, a range of its KV heads (their vectors lie side by side in each token's row, so
// the passes read memory in order), and per KV head its G query heads (G = 1, 2, 4 or 8):
//   K pass  blocks of 16/G tokens: per 16 dimensions the G heads' query slices are loaded once and
//           multiplied with every token of the block into 16 accumulators (token x head), which a
//           transposing reduction turns into the block's 16 scores, stored token-major ([t][g]).
//           The AVX2 kernel loads the queries again for every token and sums each dot product
//           alone; here both are shared by a block.
//   softmax over the token-major scores, 16 at a time (a lane's head is its index modulo G).
//   V pass  tiles of 32 tokens: per tile, 256/G dimensions at a time (at most 128) of the G heads'
//           outputs accumulate in 16 registers, each token's probability broadcast from memory.
// Codes are widened 16 (8-bit) or 32 (4-bit: low nibbles and high nibbles apart, the query and
// the outputs laid out to match) at a time. Quantised values are accumulated in code space, as in
// the AVX2 kernel: sum_t p_t (scale_t code_t + zero_t) = sum_t (p_t scale_t) code_t + sum_t p_t zero_t.
#include "kernels/cpu/decode_attention_simd.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__) && defined(__FMA__) && defined(__F16C__)

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/avx512_vectors.h"
#include "kernels/cpu/paged_rows.h"

namespace memtwin::kernels::simd {

namespace {

using namespace avx512;  // the register-level helpers written for the AVX-512 kernels

constexpr int kTile = 32;   // tokens of a V tile: their vectors stay in L1 while the outputs accumulate
constexpr int kAhead = 16;  // tokens the K pass prefetches ahead, into L2 (into L1 they evict what is in use)
constexpr int kMaxGroups = 16;

// How a cache stores its elements, as this kernel reads them.
enum class Code { fp16, e4m3, int8, int4 };

// Where dimension c of a 4-bit vector sits in the order codes4 widens each chunk of 32.
inline int even_odd_position(int c) { return c - c % 32 + codes4_position(c % 32); }

// Sixteen elements of a floating-point vector from element c (e4m3 over 2^8).
template <Code C>
inline __m512 load_floating(const std::uint8_t* vector, int c) {
  if constexpr (C == Code::e4m3) return load_e4m3_over_256(vector, c);
  return load_halves(vector, c);
}

// The K pass: scores[h][t][g] = scale * q_{h,g} . k_{h,t} for the range's KV heads h, blocks of
// T = 16/G tokens at a time. `q`: the range's query heads in order ([h][g][hd], 4-bit caches: in
// even/odd order).
template <int G, Code C>
void key_scores(const DecodeAttentionArgs& a, const std::int32_t* table, const float* q, const Heads& heads, int ctx,
                float* scores) {
  constexpr int T = kLanes / G;
  const KvFormat& f = a.shape.format;
  const Layout layout(a.shape);
  const int hd = f.head_dim;
  const std::size_t bytes = layout.vector_bytes;
  const __m512 score_scale = _mm512_set1_ps(a.scale * element_factor(f));
  Rows rows(a.k_cache, table, layout, heads.first, ctx, 0), ahead(a.k_cache, table, layout, heads.first, ctx, kAhead);
  const std::uint8_t* block[T];
  const std::uint8_t* later[T];  // the rows kAhead tokens on, whose vectors each head prefetches
  for (int t0 = 0; t0 < ctx; t0 += T) {
    const int n = std::min(T, ctx - t0);
    int later_count = 0;
    for (int j = 0; j < T; ++j) {
      block[j] = j < n ? rows.row() : block[n - 1];  // past the end: the last token again, its scores not stored
      if (j < n) {
        rows.next();
        if (ahead.valid()) later[later_count++] = ahead.row();
        ahead.next();
      }
    }
    for (int h = 0; h < heads.count; ++h) {
      const std::size_t at = static_cast<std::size_t>(h) * bytes;
      // Each head asks for its own vectors of the later rows, so that the asks spread over the
      // block's work: a burst of every head's lines at once (a whole row per token) stalls the
      // core's misses in flight and left the fp16 pass at 2.25 ms instead of 1.81 at 8K.
      for (int j = 0; j < later_count; ++j) prefetch_l2(later[j] + at, bytes);
      const float* q_h = q + static_cast<std::size_t>(h) * G * hd;
      __m512 acc[kLanes];  // [token][head]
      for (__m512& x : acc) x = _mm512_setzero_ps();
      // One 16-dimension slice: the heads' queries at `qc` times each token's vector `k(j)`.
      auto slice = [&](const float* qc, auto k) {
        __m512 qv[G];
        for (int g = 0; g < G; ++g) qv[g] = _mm512_loadu_ps(qc + static_cast<std::size_t>(g) * hd);
        for (int j = 0; j < T; ++j) {
          const __m512 kj = k(j);
          for (int g = 0; g < G; ++g) acc[j * G + g] = _mm512_fmadd_ps(qv[g], kj, acc[j * G + g]);
        }
      };
      if constexpr (C == Code::fp16 || C == Code::e4m3) {
        for (int c = 0; c < hd; c += kLanes) slice(q_h + c, [&](int j) { return load_floating<C>(block[j] + at, c); });
      } else {
        for (int gi = 0; gi < layout.groups; ++gi) {
          alignas(64) float scale[T], zero[T];
          const std::uint8_t* codes[T];
          for (int j = 0; j < T; ++j) {
            codes[j] = block[j] + at + static_cast<std::size_t>(gi) * layout.group_bytes;
            scale_and_zero(codes[j] + layout.code_bytes, scale[j], zero[j]);
          }
          auto dequantized = [&](int j, __m512 c) { return _mm512_fmadd_ps(c, _mm512_set1_ps(scale[j]), _mm512_set1_ps(zero[j])); };
          const float* qg = q_h + gi * layout.group;
          if constexpr (C == Code::int8) {
            for (int c = 0; c < layout.group; c += kLanes)
              slice(qg + c, [&](int j) { return dequantized(j, codes8(codes[j] + c)); });
          } else {  // int4: per 32 dimensions, the even ones, then the odd ones
            for (int c = 0; c < layout.group; c += 2 * kLanes) {
              slice(qg + c, [&](int j) { return dequantized(j, codes4<false>(codes[j] + c / 2)); });
              slice(qg + c + kLanes, [&](int j) { return dequantized(j, codes4<true>(codes[j] + c / 2)); });
            }
          }
        }
      }
      const __m512 s = _mm512_mul_ps(horizontal_sums16(acc), score_scale);
      float* out = scores + (static_cast<std::size_t>(h) * ctx + t0) * G;
      if (n == T) {
        _mm512_storeu_ps(out, s);
      } else {
        _mm512_mask_storeu_ps(out, static_cast<__mmask16>((1u << (n * G)) - 1), s);
      }
    }
  }
}

// The V pass: out_{h,g} = factor * sum_t p[h][t][g] v_{h,t} / denominator_{h,g}, tile by tile;
// per tile D = 16 NC dimensions at a time, NC x G accumulators in registers.
template <int G, int NC, Code C>
void weighted_values(const DecodeAttentionArgs& a, const std::int32_t* table, const Heads& heads, int ctx, const float* p,
                     const float* denominators, float* out) {
  constexpr bool kCodes = C == Code::int8 || C == Code::int4;
  constexpr int D = kLanes * NC;
  const KvFormat& f = a.shape.format;
  const Layout layout(a.shape);
  const int hd = f.head_dim, groups = layout.groups;
  const std::size_t bytes = layout.vector_bytes, span = bytes * static_cast<std::size_t>(heads.count);
  // [h][g][hd]; code space: sum_t p_t zero_t, [h][group][lane], a head g's share in lanes g, g + G, ...
  thread_local std::vector<float> acc_store, zero_store;
  acc_store.assign(static_cast<std::size_t>(heads.count) * G * hd, 0.f);
  zero_store.assign(static_cast<std::size_t>(heads.count) * groups * kLanes, 0.f);
  alignas(64) float weights[kMaxGroups][kTile * G];  // code space: p_t scale_t, [group][token][g]
  alignas(64) float pairs[2 * kTile + 2 * kLanes];   // code space: a group's (scale, zero) per token
  // Lane l of a 16-lane slice of token-major probabilities is token l / G: where its scale and its
  // zero point sit among 16 tokens' pairs.
  alignas(64) std::int32_t scale_index[kLanes], zero_index[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    scale_index[l] = 2 * (l / G);
    zero_index[l] = 2 * (l / G) + 1;
  }
  // This tile's rows and the next one's: while a head of this tile accumulates, its vectors of the
  // next tile are fetched into L2, a token at a time (a whole tile at once would stall on the
  // fetches in flight; into L1 they would evict the tile in use).
  const std::uint8_t* tiles[2][kTile];
  Rows current(a.v_cache, table, layout, heads.first, ctx, 0);
  auto fill = [&](const std::uint8_t** rows, int from) {
    const int n = std::max(0, std::min(kTile, ctx - from));
    for (int j = 0; j < n; ++j, current.next()) rows[j] = current.row();
    return n;
  };
  int next_n = fill(tiles[0], 0);
  for (int j = 0; j < next_n; ++j) prefetch_l2(tiles[0][j], span);
  for (int t0 = 0, tile = 0; t0 < ctx; t0 += kTile, tile ^= 1) {
    const std::uint8_t** rows = tiles[tile];
    const std::uint8_t** next = tiles[tile ^ 1];
    const int n = next_n;
    next_n = fill(next, t0 + kTile);
    for (int h = 0; h < heads.count; ++h) {
      const float* p_h = p + (static_cast<std::size_t>(h) * ctx + t0) * G;  // [j][g]
      float* acc_h = acc_store.data() + static_cast<std::size_t>(h) * G * hd;
      const std::size_t at = static_cast<std::size_t>(h) * bytes;
      if constexpr (kCodes) {  // the tile's weights p_t scale_t and zero sums, 16 / G tokens at a time
        for (int gi = 0; gi < groups; ++gi) {
          alignas(64) std::uint32_t raw[kTile] = {};
          const std::size_t params = at + static_cast<std::size_t>(gi) * layout.group_bytes + layout.code_bytes;
          for (int j = 0; j < n; ++j) std::memcpy(&raw[j], rows[j] + params, 4);
          for (int j = 0; j < kTile; j += 8)
            _mm512_store_ps(pairs + 2 * j, _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(raw + j))));
          float* zero_sums = zero_store.data() + (static_cast<std::size_t>(h) * groups + gi) * kLanes;
          __m512 zero_sum = _mm512_loadu_ps(zero_sums);
          for (int j0 = 0; j0 < n; j0 += kLanes / G) {
            const int lanes = std::min(kLanes, (n - j0) * G);
            const __m512 probs = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << lanes) - 1), p_h + j0 * G);
            const __m512 low = _mm512_loadu_ps(pairs + 2 * j0), high = _mm512_loadu_ps(pairs + 2 * j0 + kLanes);
            const __m512 scale = _mm512_permutex2var_ps(low, _mm512_load_si512(scale_index), high);
            const __m512 zero = _mm512_permutex2var_ps(low, _mm512_load_si512(zero_index), high);
            _mm512_store_ps(weights[gi] + j0 * G, _mm512_mul_ps(probs, scale));
            zero_sum = _mm512_fmadd_ps(probs, zero, zero_sum);
          }
          _mm512_storeu_ps(zero_sums, zero_sum);
        }
      }
      for (int c0 = 0; c0 < hd; c0 += D) {
        __m512 acc[G][NC];
        for (int g = 0; g < G; ++g)
          for (int k = 0; k < NC; ++k) acc[g][k] = _mm512_loadu_ps(acc_h + g * hd + c0 + k * kLanes);
        // Code space: where each slice's codes sit in a vector, and their group.
        std::size_t code_at[NC] = {};
        int group_of[NC] = {};
        for (int k = 0; k < NC && kCodes; ++k) {
          const int c = c0 + k * kLanes;
          const int first = C == Code::int4 ? c - c % (2 * kLanes) : c;  // int4: a 32-dimension chunk's first
          group_of[k] = first / layout.group;
          code_at[k] = static_cast<std::size_t>(group_of[k]) * layout.group_bytes +
                       static_cast<std::size_t>(first % layout.group) / (C == Code::int4 ? 2 : 1);
        }
        for (int j = 0; j < n; ++j) {
          const std::uint8_t* v = rows[j] + at;
          if (c0 == 0 && j < next_n) prefetch_l2(next[j] + at, bytes);
          for (int k = 0; k < NC; ++k) {
            __m512 x;
            const float* w;  // the G heads' weights of this token (and group)
            if constexpr (C == Code::fp16 || C == Code::e4m3) {
              x = load_floating<C>(v, c0 + k * kLanes);
              w = p_h + j * G;
            } else {
              if constexpr (C == Code::int8) {
                x = codes8(v + code_at[k]);
              } else {  // int4: slices k, k + 1 of a 32-dimension chunk hold its even and odd dimensions
                x = (k % 2 == 0) ? codes4<false>(v + code_at[k]) : codes4<true>(v + code_at[k]);
              }
              w = weights[group_of[k]] + j * G;
            }
            for (int g = 0; g < G; ++g) acc[g][k] = _mm512_fmadd_ps(_mm512_set1_ps(w[g]), x, acc[g][k]);
          }
        }
        for (int g = 0; g < G; ++g)
          for (int k = 0; k < NC; ++k) _mm512_storeu_ps(acc_h + g * hd + c0 + k * kLanes, acc[g][k]);
      }
    }
  }
  if constexpr (kCodes) {  // each head's zero sums from its lanes
    for (std::size_t i = 0; i < zero_store.size(); i += kLanes)
      _mm512_storeu_ps(zero_store.data() + i, fold_sum<G>(_mm512_loadu_ps(zero_store.data() + i)));
  }
  for (int head = 0; head < G * heads.count; ++head) {  // the query heads, in order
    const int h = head / G, g = head % G;
    const float inv = element_factor(f) / denominators[head];
    for (int c = 0; c < hd; ++c) {
      float sum = acc_store[static_cast<std::size_t>(head) * hd + (C == Code::int4 ? even_odd_position(c) : c)];
      if constexpr (kCodes) sum += zero_store[(static_cast<std::size_t>(h) * groups + c / layout.group) * kLanes + g];
      out[static_cast<std::size_t>(head) * hd + c] = sum * inv;
    }
  }
}

template <int G, Code C>
void attend(const DecodeAttentionArgs& a, int seq, const Heads& heads, bool vnni) {
  constexpr int NC = std::min(8, kLanes / G);
  const int hd = a.shape.format.head_dim;
  const int ctx = a.context_lens[seq];
  const int q_heads = G * heads.count;  // the query heads of these KV heads, consecutive
  const float* q = a.query + (static_cast<std::size_t>(seq) * a.q_heads + static_cast<std::size_t>(heads.first) * G) * hd;
  thread_local std::vector<float> scores, reordered, denominators, numerators;
  if (C == Code::int4 && !vnni) {  // the queries in the codes' even/odd order
    reordered.resize(static_cast<std::size_t>(q_heads) * hd);
    for (int head = 0; head < q_heads; ++head)
      for (int c = 0; c < hd; ++c) reordered[static_cast<std::size_t>(head) * hd + even_odd_position(c)] = q[head * hd + c];
    q = reordered.data();
  }
  const std::int32_t* table = a.block_tables + static_cast<std::size_t>(seq) * a.max_blocks_per_seq;
  scores.resize(static_cast<std::size_t>(q_heads) * ctx);
  denominators.resize(static_cast<std::size_t>(q_heads));
  if (vnni) {  // integer K and V passes: scores a query head's row after another
    vnni_key_scores(a, seq, heads.first, heads.count, scores.data());
    for (int head = 0; head < q_heads; ++head)
      softmax<1>(scores.data() + static_cast<std::size_t>(head) * ctx, ctx, denominators.data() + head);
    write_probabilities(a, seq, heads.first * G, q_heads, scores.data(), denominators.data());
    if (a.out) vnni_weighted_values(a, seq, heads.first, heads.count, scores.data(), denominators.data());
    return;
  }
  key_scores<G, C>(a, table, q, heads, ctx, scores.data());
  for (int h = 0; h < heads.count; ++h)
    softmax<G>(scores.data() + static_cast<std::size_t>(h) * ctx * G, ctx, denominators.data() + static_cast<std::size_t>(h) * G);
  if (a.probs) {  // write_probabilities takes the numerators head-major
    numerators.resize(scores.size());
    for (int h = 0; h < heads.count; ++h)
      for (int t = 0; t < ctx; ++t)
        for (int g = 0; g < G; ++g)
          numerators[(static_cast<std::size_t>(h) * G + g) * ctx + t] = scores[(static_cast<std::size_t>(h) * ctx + t) * G + g];
    write_probabilities(a, seq, heads.first * G, q_heads, numerators.data(), denominators.data());
  }
  if (!a.out) return;
  float* out = a.out + (static_cast<std::size_t>(seq) * a.q_heads + static_cast<std::size_t>(heads.first) * G) * hd;
  weighted_values<G, NC, C>(a, table, heads, ctx, scores.data(), denominators.data(), out);
}

// The code a format's elements take in this kernel, for the shapes avx512_takes.
Code code_of(const KvFormat& f) {
  switch (f.element) {
    case KvElement::fp16: return Code::fp16;
    case KvElement::fp8: return Code::e4m3;
    default: return f.bits() == 8 ? Code::int8 : Code::int4;
  }
}

template <int G>
void attend_format(const DecodeAttentionArgs& a, int seq, const Heads& heads, bool vnni) {
  switch (code_of(a.shape.format)) {
    case Code::fp16: attend<G, Code::fp16>(a, seq, heads, false); return;
    case Code::e4m3: attend<G, Code::e4m3>(a, seq, heads, false); return;
    case Code::int8: attend<G, Code::int8>(a, seq, heads, vnni); return;
    case Code::int4: attend<G, Code::int4>(a, seq, heads, vnni); return;
  }
}

}  // namespace

bool avx512_takes(const DecodeAttentionArgs& a) {
  const KvFormat& f = a.shape.format;
  const int G = a.q_heads / a.shape.kv_heads;
  if (f.head_dim > 256 || (G != 1 && G != 2 && G != 4 && G != 8)) return false;
  if (f.head_dim % (kLanes * std::min(8, kLanes / G)) != 0) return false;  // the V pass's slices
  if (f.element == KvElement::fp16 || f.element == KvElement::fp8) return true;
  if (!f.quantized() || f.groups() > kMaxGroups) return false;
  return (f.bits() == 8 && f.group % kLanes == 0) || (f.bits() == 4 && f.group % (2 * kLanes) == 0);
}

bool attend_heads_avx512(const DecodeAttentionArgs& a, int seq, int first_kv_head, int kv_heads, bool vnni) {
  if (!avx512_takes(a)) return false;
  const Heads heads{first_kv_head, kv_heads};
  vnni = vnni && vnni_takes(a.shape.format) && vnni_value_tile_takes(a.shape.format, a.q_heads / a.shape.kv_heads);
  switch (a.q_heads / a.shape.kv_heads) {
    case 1: attend_format<1>(a, seq, heads, vnni); break;
    case 2: attend_format<2>(a, seq, heads, vnni); break;
    case 4: attend_format<4>(a, seq, heads, vnni); break;
    default: attend_format<8>(a, seq, heads, vnni); break;
  }
  return true;
}

}  // namespace memtwin::kernels::simd

#else

namespace memtwin::kernels::simd {
bool avx512_takes(const DecodeAttentionArgs&) { return false; }
bool attend_heads_avx512(const DecodeAttentionArgs&, int, int, int, bool) { return false; }
}  // namespace memtwin::kernels::simd

#endif
