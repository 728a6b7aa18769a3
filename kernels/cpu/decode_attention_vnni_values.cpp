// The AVX-512 paged kernel's V pass for 8- and 4-bit values with VNNI (vpdpwssd: sixteen lanes,
// each adding two signed 16-bit products to a 32-bit sum), as llama.cpp's CPU backend multiplies
// attention probabilities rounded to integers with quantised values. Compiled with AVX-512 VNNI
// (this file alone, as decode_attention_vnni.cpp); called only on CPUs that have it.
//
// A value's group (codes c_i, scale s_t, zero point z_t: v_i = s_t c_i + z_t) weighted by the
// probability p_t, summed over the tokens:
//   sum_t p_t v_t,i = sum_t (p_t s_t) c_t,i + sum_t p_t z_t.
// The zero points' sum is kept in floating point. The weights w_t = p_t s_t of each tile of
// kIntegerWeightTile (32) tokens are rounded to 16-bit fixed point on a scale of their own, the
// tile's largest probability (per query head) times its largest scale (per group) over 32767, so
// every weight is within half a step of w_t (kv_kernels.h states the bound this sets; one byte
// would leave 1/254 of the largest weight, 128 times more). The codes of two tokens sit in each
// 32-bit lane, one channel per lane, so one vpdpwssd adds two tokens' products to sixteen channels
// of a query head's output; a tile's integer sums (at most 32 x 255 x 32767, within 32 bits) are
// scaled into the floating-point outputs once per tile. The floating-point V pass spends a
// widening of each code and a multiply-add per channel, token and query head: twice the
// instructions, on the same ports.
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

namespace memtwin::kernels::simd {

namespace {

using namespace avx512;

constexpr int kTile = kIntegerWeightTile;  // tokens whose weights share a scale: kVectors vectors of probabilities
constexpr int kVectors = kTile / kLanes;
constexpr int kPairs = kTile / 2;
static_assert(kVectors == 1 || kVectors == 2);
constexpr int kChunk = 32;  // channels of a chunk: two output vectors of sixteen
constexpr int kMaxGroups = 8;  // head_dim 256 in groups of 32
constexpr float kSteps = 32767.f;

// acc + the products of each lane's two 16-bit codes in `codes` with the two 16-bit weights at
// base[Word], broadcast from memory inside the instruction (see dot_broadcast in
// decode_attention_vnni.cpp for why this is written out), addressed from one base register: with
// a register for each word's address GCC runs out of them and moves addresses through vectors.
// The instruction reads from base[0 .. Span - 1].
template <int Word, int Span>
inline __m512i dot_words(__m512i acc, __m512i codes, const std::int32_t* base) {
  asm("vpdpwssd %c[offset](%[base])%{1to16%}, %[c], %[acc]"
      : [acc] "+v"(acc)
      : [c] "v"(codes), [base] "r"(base), [offset] "i"(4 * Word), "m"(*reinterpret_cast<const std::int32_t(*)[Span]>(base)));
  return acc;
}

// A chunk's codes of tokens a and b, two channels' to a 32-bit lane (a's in the low half):
// 8-bit codes (32 bytes each): x[0] lane l holds channel 8 (l / 4) + l % 4, x[1] four channels
// further; 4-bit codes (16 bytes each, channel 2i in byte i's low nibble): x[0] lane l channel
// 2l, x[1] channel 2l + 1.
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

// The channel (within its chunk) that lane l of output vector k accumulates.
template <bool Int4>
constexpr int chunk_channel(int k, int l) {
  return Int4 ? 2 * l + k : 8 * (l / 4) + 4 * k + l % 4;
}

// Where the weights of tokens 2j and 2j + 1 sit among a tile's sixteen 32-bit words: the tile's
// two vectors of weights (tokens 0-15 and 16-31) packed to 16 bits interleave their 128-bit lanes
// (_mm512_packs_epi32).
constexpr int word_of_pair(int j) {
  if (kVectors == 1) return j;
  return j < kPairs / 2 ? 4 * (j / 2) + j % 2 : 4 * ((j - kPairs / 2) / 2) + 2 + j % 2;
}

// n zeroed floats from a cache line's start, in `storage` (a vector of sixteen floats each
// straddling two lines costs two accesses).
inline float* zeroed_lines(std::vector<float>& storage, std::size_t n) {
  storage.assign(n + kLanes - 1, 0.f);
  const auto address = reinterpret_cast<std::uintptr_t>(storage.data());
  return storage.data() + ((64 - address % 64) % 64) / sizeof(float);
}

// A tile's rounded weights of one KV head, two tokens a word (see word_of_pair), and what a unit
// of each stands for.
template <int G>
struct TileWeights {
  alignas(64) std::int32_t words[kMaxGroups][G][kPairs];
  float factor[kMaxGroups][G];
};

// out_{h,g} = sum_t p[h][g][t] v_{h,t} / denominator_{h,g}; p head-major ([h][g][ctx]). The work
// goes in units of a tile and a KV head, tile by tile; each unit's weights are computed before the
// previous unit's products are issued (two buffers), so that their chain of latencies (loads,
// maxima, division, rounding) overlaps those products instead of stalling between units.
template <int G, bool Int4>
void weighted_values(const DecodeAttentionArgs& a, const std::int32_t* table, const Heads& heads, int ctx, const float* p,
                     const float* denominators, float* out) {
  const KvFormat& f = a.shape.format;
  const Layout layout(a.shape);
  const int hd = f.head_dim, groups = layout.groups, chunks = layout.group / kChunk;
  const std::size_t chunk_bytes = Int4 ? kChunk / 2 : kChunk;
  const std::size_t bytes = layout.vector_bytes, span = bytes * static_cast<std::size_t>(heads.count);
  // Outputs in the lanes' channel order ([h][g][hd]), and sum_t p_t z_t in lanes of tokens
  // ([h][g][group][lane]), folded at the end.
  thread_local std::vector<float> acc_storage, zero_storage;
  float* const acc_store = zeroed_lines(acc_storage, static_cast<std::size_t>(heads.count) * G * hd);
  float* const zero_store = zeroed_lines(zero_storage, static_cast<std::size_t>(heads.count) * G * groups * kLanes);
  TileWeights<G> buffers[2];
  // The rows of tiles k - 1, k and k + 1 while tile k's units are prepared and tile k - 1's run,
  // and how many of each are the sequence's (the rest repeat its last row, with weight 0).
  const std::uint8_t* tile_rows[4][kTile];
  int tile_tokens[4] = {};
  Rows rows_of(a.v_cache, table, layout, heads.first, ctx, 0);
  auto fill = [&](int tile) {
    const std::uint8_t** rows = tile_rows[tile & 3];
    const int n = std::max(0, std::min(kTile, ctx - tile * kTile));
    for (int j = 0; j < n; ++j, rows_of.next()) rows[j] = rows_of.row();
    for (int j = n; j < kTile && n > 0; ++j) rows[j] = rows[n - 1];
    tile_tokens[tile & 3] = n;
  };
  const int tiles = (ctx + kTile - 1) / kTile, units = tiles * heads.count;
  fill(0);
  for (int j = 0; j < tile_tokens[0]; ++j) prefetch_l2(tile_rows[0][j], span);
  if (tiles > 1) fill(1);

  // The weights of unit u (its tile's rows already filled), and its zero points' sums.
  auto prepare = [&](int u, TileWeights<G>& out_weights) {
    const int tile = u / heads.count, h = u % heads.count, t0 = tile * kTile, n = tile_tokens[tile & 3];
    const std::uint8_t* const* rows = tile_rows[tile & 3];
    __mmask16 valid[kVectors];
    for (int v = 0; v < kVectors; ++v) valid[v] = static_cast<__mmask16>((1u << std::clamp(n - v * kLanes, 0, kLanes)) - 1);
    const std::size_t at = static_cast<std::size_t>(h) * bytes;
    // The tile's probabilities (per query head) and scales and zero points (per group), a token a
    // lane in two vectors, and their largest magnitudes.
    __m512 prob[G][kVectors], scale[kMaxGroups][kVectors], largest_of[kLanes];
    const __m512 sign = _mm512_set1_ps(-0.f);
    auto larger = [&](const __m512* x) {
      __m512 m = _mm512_andnot_ps(sign, x[0]);
      for (int v = 1; v < kVectors; ++v) m = _mm512_max_ps(m, _mm512_andnot_ps(sign, x[v]));
      return m;
    };
    for (int g = 0; g < G; ++g) {
      for (int v = 0; v < kVectors; ++v)
        prob[g][v] = _mm512_maskz_loadu_ps(valid[v], p + static_cast<std::size_t>(h * G + g) * ctx + t0 + v * kLanes);
      largest_of[g] = larger(prob[g]);
    }
    for (int gi = 0; gi < groups; ++gi) {
      // Loaded one by one into a register (through memory, the vector load waits for the sixteen
      // stores to retire).
      const std::size_t params = at + static_cast<std::size_t>(gi) * layout.group_bytes + layout.code_bytes;
      auto word = [&](int j) {
        std::int32_t x;
        std::memcpy(&x, rows[j] + params, 4);
        return x;
      };
      __m512 zero[kVectors];
      for (int v = 0, j = 0; v < kVectors; ++v, j += kLanes) {
        const __m512i both = _mm512_setr_epi32(word(j), word(j + 1), word(j + 2), word(j + 3), word(j + 4), word(j + 5), word(j + 6),
                                               word(j + 7), word(j + 8), word(j + 9), word(j + 10), word(j + 11), word(j + 12),
                                               word(j + 13), word(j + 14), word(j + 15));
        scales_and_zeros(both, scale[gi][v], zero[v]);
      }
      largest_of[G + gi] = larger(scale[gi]);
      for (int g = 0; g < G; ++g) {
        float* sums = zero_store + ((static_cast<std::size_t>(h) * G + g) * groups + gi) * kLanes;
        __m512 sum = _mm512_load_ps(sums);
        for (int v = 0; v < kVectors; ++v) sum = _mm512_fmadd_ps(prob[g][v], zero[v], sum);
        _mm512_store_ps(sums, sum);
      }
    }
    for (int i = G + groups; i < kLanes; ++i) largest_of[i] = _mm512_setzero_ps();
    // A weight's unit: the largest probability times the largest scale over kSteps.
    // Probabilities below a float's smallest normal (softmax's exp stops above it) weigh nothing,
    // as do groups whose scales are all 0 (their values are their zero points).
    const __m512 largest = horizontal16(largest_of, [](__m512 x, __m512 y) { return _mm512_max_ps(x, y); });
    const __mmask16 scale_lanes = static_cast<__mmask16>(((1u << groups) - 1) << G);
    const __m512 numerator = _mm512_mask_blend_ps(scale_lanes, _mm512_set1_ps(1.f), _mm512_set1_ps(kSteps));
    alignas(64) float inverse[kLanes], maxima[kLanes], unit[kLanes];
    _mm512_store_ps(inverse, _mm512_maskz_div_ps(_mm512_cmp_ps_mask(largest, _mm512_set1_ps(1e-37f), _CMP_GE_OQ), numerator, largest));
    _mm512_store_ps(maxima, largest);
    _mm512_store_ps(unit, _mm512_div_ps(largest, _mm512_set1_ps(kSteps)));
    for (int g = 0; g < G; ++g)
      for (auto& x : prob[g]) x = _mm512_mul_ps(x, _mm512_set1_ps(inverse[g]));
    for (int gi = 0; gi < groups; ++gi) {
      for (auto& x : scale[gi]) x = _mm512_mul_ps(x, _mm512_set1_ps(inverse[G + gi]));
      for (int g = 0; g < G; ++g) {
        __m512i w[kVectors];
        for (int v = 0; v < kVectors; ++v) w[v] = _mm512_cvtps_epi32(_mm512_mul_ps(prob[g][v], scale[gi][v]));
        if constexpr (kVectors == 2) {
          _mm512_store_si512(out_weights.words[gi][g], _mm512_packs_epi32(w[0], w[1]));  // see word_of_pair
        } else {
          _mm256_store_si256(reinterpret_cast<__m256i*>(out_weights.words[gi][g]), _mm512_cvtepi32_epi16(w[0]));
        }
        out_weights.factor[gi][g] = maxima[g] * unit[G + gi];
      }
    }
  };

  // Unit u's products, into the outputs; meanwhile the next tile's vectors of its head go into L2,
  // a share with each chunk (a tile's at once would stall on the fetches in flight).
  auto run = [&](int u, const TileWeights<G>& tw) {
    const int tile = u / heads.count, h = u % heads.count;
    const std::uint8_t* const* rows = tile_rows[tile & 3];
    const std::uint8_t* const* next = tile_rows[(tile + 1) & 3];
    const int next_n = tile + 1 < tiles ? tile_tokens[(tile + 1) & 3] : 0;
    const std::size_t at = static_cast<std::size_t>(h) * bytes;
    for (int gi = 0; gi < groups; ++gi) {
      for (int ch = 0; ch < chunks; ++ch) {
        const int share = gi * chunks + ch, shares = groups * chunks;
        for (int r = next_n * share / shares; r < next_n * (share + 1) / shares; ++r) prefetch_l2(next[r] + at, bytes);
        const std::size_t code_at = at + static_cast<std::size_t>(gi) * layout.group_bytes + ch * chunk_bytes;
        __m512i dot[G][2];
        for (auto& d : dot) d[0] = d[1] = _mm512_setzero_si512();
        const std::int32_t* w = tw.words[gi][0];
        auto pair = [&]<int J>(std::integral_constant<int, J>) {
          __m512i x[2];
          pair_codes<Int4>(rows[2 * J] + code_at, rows[2 * J + 1] + code_at, x);
          [&]<int... Gs>(std::integer_sequence<int, Gs...>) {
            ((dot[Gs][0] = dot_words<Gs * kPairs + word_of_pair(J), G * kPairs>(dot[Gs][0], x[0], w)), ...);
            ((dot[Gs][1] = dot_words<Gs * kPairs + word_of_pair(J), G * kPairs>(dot[Gs][1], x[1], w)), ...);
          }(std::make_integer_sequence<int, G>{});
        };
        [&]<int... Js>(std::integer_sequence<int, Js...>) {
          (pair(std::integral_constant<int, Js>{}), ...);
        }(std::make_integer_sequence<int, kPairs>{});
        for (int g = 0; g < G; ++g) {
          float* acc = acc_store + (static_cast<std::size_t>(h) * G + g) * hd + (gi * chunks + ch) * kChunk;
          const __m512 fg = _mm512_set1_ps(tw.factor[gi][g]);
          for (int k = 0; k < 2; ++k)
            _mm512_storeu_ps(acc + k * kLanes, _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[g][k]), fg, _mm512_loadu_ps(acc + k * kLanes)));
        }
      }
    }
  };

  prepare(0, buffers[0]);
  for (int u = 0; u < units; ++u) {
    if (u + 1 < units) {
      const int next_tile = (u + 1) / heads.count;
      if ((u + 1) % heads.count == 0 && next_tile + 1 < tiles) fill(next_tile + 1);  // the tile after, for prefetching
      prepare(u + 1, buffers[(u + 1) & 1]);
    }
    run(u, buffers[u & 1]);
  }
  for (int head = 0; head < G * heads.count; ++head) {  // the query heads, in order
    const float inv = 1.f / denominators[head];
    const float* acc = acc_store + static_cast<std::size_t>(head) * hd;
    float* o = out + static_cast<std::size_t>(head) * hd;
    for (int gi = 0; gi < groups; ++gi) {
      const float zero = _mm512_reduce_add_ps(_mm512_loadu_ps(zero_store + (static_cast<std::size_t>(head) * groups + gi) * kLanes));
      for (int ch = 0; ch < chunks; ++ch) {
        const int first = gi * layout.group + ch * kChunk;
        for (int k = 0; k < 2; ++k)
          for (int l = 0; l < kLanes; ++l) o[first + chunk_channel<Int4>(k, l)] = (acc[first + k * kLanes + l] + zero) * inv;
      }
    }
  }
}

template <bool Int4>
void weighted_values_of(const DecodeAttentionArgs& a, const std::int32_t* table, const Heads& heads, int ctx, const float* p,
                        const float* denominators, float* out) {
  switch (a.q_heads / a.shape.kv_heads) {
    case 1: weighted_values<1, Int4>(a, table, heads, ctx, p, denominators, out); break;
    case 2: weighted_values<2, Int4>(a, table, heads, ctx, p, denominators, out); break;
    case 4: weighted_values<4, Int4>(a, table, heads, ctx, p, denominators, out); break;
    default: weighted_values<8, Int4>(a, table, heads, ctx, p, denominators, out); break;
  }
}

}  // namespace

void vnni_weighted_values(const DecodeAttentionArgs& a, int seq, int first_kv_head, int kv_heads, const float* numerators,
                          const float* denominators) {
  const KvFormat& f = a.shape.format;
  const int group_heads = a.q_heads / a.shape.kv_heads;
  float* out = a.out + (static_cast<std::size_t>(seq) * a.q_heads + static_cast<std::size_t>(first_kv_head) * group_heads) * f.head_dim;
  const std::int32_t* table = a.block_tables + static_cast<std::size_t>(seq) * a.max_blocks_per_seq;
  const Heads heads{first_kv_head, kv_heads};
  if (f.bits() == 4) {
    weighted_values_of<true>(a, table, heads, a.context_lens[seq], numerators, denominators, out);
  } else {
    weighted_values_of<false>(a, table, heads, a.context_lens[seq], numerators, denominators, out);
  }
}

}  // namespace memtwin::kernels::simd

#else

namespace memtwin::kernels::simd {
void vnni_weighted_values(const DecodeAttentionArgs&, int, int, int, const float*, const float*) {}
}  // namespace memtwin::kernels::simd

#endif
