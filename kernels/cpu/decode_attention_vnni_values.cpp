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
#include "kernels/cpu/vnni_vectors.h"

namespace memtwin::kernels::simd {

namespace {

using namespace avx512;
using namespace vnni;

constexpr int kTile = kIntegerWeightTile;  // tokens whose weights share a scale: two vectors of probabilities
constexpr int kVectors = kTile / kLanes;
constexpr int kPairs = kTile / 2;
static_assert(kVectors == 2 && kPairs == 16, "the weights pack two vectors into one (word_of_pair)");
constexpr int kChunk = 32;  // channels of a chunk: two output vectors of sixteen
constexpr int kMaxGroups = 8;  // head_dim 256 in groups of 32
constexpr float kSteps = 32767.f;

// A tile's rounded weights, two tokens a word (see word_of_pair), and what a unit of each stands
// for, per value group and query head.
template <int H>
struct TileWeights {
  alignas(64) std::int32_t words[kMaxGroups][H][kPairs];
  float factor[kMaxGroups][H];
};

// The tile's weights p_t scale_t rounded (see the file's comment), and its zero points' sums.
template <int H, int FixedGroups>
void round_weights(const KvFormat& f, const VnniValueTile& tile, TileWeights<H>& out) {
  const int groups = FixedGroups > 0 ? FixedGroups : f.groups(), group_bytes = f.group_bytes(), code_bytes = f.code_bytes_per_group();
  __mmask16 valid[kVectors];
  for (int v = 0; v < kVectors; ++v) valid[v] = static_cast<__mmask16>((1u << std::clamp(tile.tokens - v * kLanes, 0, kLanes)) - 1);
  // The tile's probabilities (per query head) and scales and zero points (per group), a token a
  // lane, and their largest magnitudes.
  __m512 prob[H][kVectors], scale[kMaxGroups][kVectors], largest_of[kLanes];
  const __m512 sign = _mm512_set1_ps(-0.f);
  auto larger = [&](const __m512* x) {
    __m512 m = _mm512_andnot_ps(sign, x[0]);
    for (int v = 1; v < kVectors; ++v) m = _mm512_max_ps(m, _mm512_andnot_ps(sign, x[v]));
    return m;
  };
  for (int h = 0; h < H; ++h) {
    for (int v = 0; v < kVectors; ++v) prob[h][v] = _mm512_maskz_loadu_ps(valid[v], tile.probs + h * tile.probs_stride + v * kLanes);
    largest_of[h] = larger(prob[h]);
  }
  for (int gi = 0; gi < groups; ++gi) {
    // Loaded one by one into a register (through memory, the vector load waits for the sixteen
    // stores to retire).
    const std::size_t params = tile.offset + static_cast<std::size_t>(gi) * group_bytes + code_bytes;
    auto word = [&](int j) {
      std::int32_t x;
      std::memcpy(&x, tile.rows[j] + params, 4);
      return x;
    };
    __m512 zero[kVectors];
    for (int v = 0, j = 0; v < kVectors; ++v, j += kLanes) {
      const __m512i both = _mm512_setr_epi32(word(j), word(j + 1), word(j + 2), word(j + 3), word(j + 4), word(j + 5), word(j + 6),
                                             word(j + 7), word(j + 8), word(j + 9), word(j + 10), word(j + 11), word(j + 12),
                                             word(j + 13), word(j + 14), word(j + 15));
      scales_and_zeros(both, scale[gi][v], zero[v]);
    }
    largest_of[H + gi] = larger(scale[gi]);
    for (int h = 0; h < H; ++h) {
      float* sums = tile.zero_sums + (static_cast<std::size_t>(h) * groups + gi) * kLanes;
      __m512 sum = _mm512_loadu_ps(sums);
      for (int v = 0; v < kVectors; ++v) sum = _mm512_fmadd_ps(prob[h][v], zero[v], sum);
      _mm512_storeu_ps(sums, sum);
    }
  }
  for (int i = H + groups; i < kLanes; ++i) largest_of[i] = _mm512_setzero_ps();
  // A weight's unit: the largest probability times the largest scale over kSteps. Probabilities
  // below a float's smallest normal (softmax's exp stops above it) weigh nothing, as do groups
  // whose scales are all 0 (their values are their zero points).
  const __m512 largest = horizontal16(largest_of, [](__m512 x, __m512 y) { return _mm512_max_ps(x, y); });
  const __mmask16 scale_lanes = static_cast<__mmask16>(((1u << groups) - 1) << H);
  const __m512 numerator = _mm512_mask_blend_ps(scale_lanes, _mm512_set1_ps(1.f), _mm512_set1_ps(kSteps));
  alignas(64) float inverse[kLanes], maxima[kLanes], unit[kLanes];
  _mm512_store_ps(inverse, _mm512_maskz_div_ps(_mm512_cmp_ps_mask(largest, _mm512_set1_ps(1e-37f), _CMP_GE_OQ), numerator, largest));
  _mm512_store_ps(maxima, largest);
  _mm512_store_ps(unit, _mm512_div_ps(largest, _mm512_set1_ps(kSteps)));
  for (int h = 0; h < H; ++h)
    for (auto& x : prob[h]) x = _mm512_mul_ps(x, _mm512_set1_ps(inverse[h]));
  for (int gi = 0; gi < groups; ++gi) {
    for (auto& x : scale[gi]) x = _mm512_mul_ps(x, _mm512_set1_ps(inverse[H + gi]));
    for (int h = 0; h < H; ++h) {
      __m512i w[kVectors];
      for (int v = 0; v < kVectors; ++v) w[v] = _mm512_cvtps_epi32(_mm512_mul_ps(prob[h][v], scale[gi][v]));
      _mm512_store_si512(out.words[gi][h], _mm512_packs_epi32(w[0], w[1]));  // see word_of_pair
      out.factor[gi][h] = maxima[h] * unit[H + gi];
    }
  }
}

// The tile's products, into the outputs; meanwhile the rows to prefetch go into L2, a share with
// each chunk (all at once would stall on the fetches in flight).
template <int H, bool Int4, int FixedGroups, int FixedChunks>
void weigh_codes(const KvFormat& f, const VnniValueTile& tile, const TileWeights<H>& tw) {
  const int groups = FixedGroups > 0 ? FixedGroups : f.groups(), chunks = FixedChunks > 0 ? FixedChunks : f.group / kChunk;
  const int group_bytes = f.group_bytes(), hd = f.head_dim;
  const std::size_t chunk_bytes = Int4 ? kChunk / 2 : kChunk, bytes = f.vector_bytes();
  const std::uint8_t* const* rows = tile.rows;
  for (int gi = 0; gi < groups; ++gi) {
    for (int ch = 0; ch < chunks; ++ch) {
      const int share = gi * chunks + ch, shares = groups * chunks;
      for (int r = tile.prefetch_count * share / shares; r < tile.prefetch_count * (share + 1) / shares; ++r)
        prefetch_l2(tile.prefetch[r] + tile.offset, bytes);
      const std::size_t code_at = tile.offset + static_cast<std::size_t>(gi) * group_bytes + ch * chunk_bytes;
      __m512i dot[H][2];
      for (auto& d : dot) d[0] = d[1] = _mm512_setzero_si512();
      const std::int32_t* w = tw.words[gi][0];
      auto pair = [&]<int J>(std::integral_constant<int, J>) {
        __m512i x[2];
        pair_codes<Int4>(rows[2 * J] + code_at, rows[2 * J + 1] + code_at, x);
        [&]<int... Hs>(std::integer_sequence<int, Hs...>) {
          ((dot[Hs][0] = dot_words<Hs * kPairs + word_of_pair(J), H * kPairs>(dot[Hs][0], x[0], w)), ...);
          ((dot[Hs][1] = dot_words<Hs * kPairs + word_of_pair(J), H * kPairs>(dot[Hs][1], x[1], w)), ...);
        }(std::make_integer_sequence<int, H>{});
      };
      [&]<int... Js>(std::integer_sequence<int, Js...>) {
        (pair(std::integral_constant<int, Js>{}), ...);
      }(std::make_integer_sequence<int, kPairs>{});
      for (int h = 0; h < H; ++h) {
        float* acc = tile.acc + static_cast<std::size_t>(h) * hd + (gi * chunks + ch) * kChunk;
        const __m512 fh = _mm512_set1_ps(tw.factor[gi][h]);
        for (int k = 0; k < 2; ++k)
          _mm512_storeu_ps(acc + k * kLanes, _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[h][k]), fh, _mm512_loadu_ps(acc + k * kLanes)));
      }
    }
  }
}

// FixedGroups, FixedChunks: the format's value groups and a group's chunks where known when
// compiled, else 0 (then the format's). With them fixed the groups' scales stay in registers and
// the prefetch shares take no division.
template <int H, int FixedGroups, int FixedChunks>
void weigh_tile(const KvFormat& f, const VnniValueTile& tile) {
  TileWeights<H> weights;
  round_weights<H, FixedGroups>(f, tile, weights);
  if (f.bits() == 4) {
    weigh_codes<H, true, FixedGroups, FixedChunks>(f, tile, weights);
  } else {
    weigh_codes<H, false, FixedGroups, FixedChunks>(f, tile, weights);
  }
}

// integer_passes_fixed_shape's loops' counts fixed when compiled (3-4% of int4 and int8 decode
// attention on Zen 4).
template <int H>
void weigh_tile(const KvFormat& f, const VnniValueTile& tile) {
  if (integer_passes_fixed_shape(f)) return weigh_tile<H, 4, 1>(f, tile);
  weigh_tile<H, 0, 0>(f, tile);
}

// n zeroed floats from a cache line's start, in `storage` (a vector of sixteen floats each
// straddling two lines costs two accesses).
inline float* zeroed_lines(std::vector<float>& storage, std::size_t n) {
  storage.assign(n + kLanes - 1, 0.f);
  const auto address = reinterpret_cast<std::uintptr_t>(storage.data());
  return storage.data() + ((64 - address % 64) % 64) / sizeof(float);
}

}  // namespace

bool vnni_value_tile_takes(const KvFormat& f, int heads) {
  return vnni_takes(f) && f.groups() <= kMaxGroups && heads + f.groups() <= kLanes && (heads <= 4 || heads == 8);
}

void vnni_weigh_tile(const KvFormat& f, int heads, const VnniValueTile& tile) {
  switch (heads) {
    case 1: return weigh_tile<1>(f, tile);
    case 2: return weigh_tile<2>(f, tile);
    case 3: return weigh_tile<3>(f, tile);
    case 4: return weigh_tile<4>(f, tile);
    default: return weigh_tile<8>(f, tile);
  }
}

int vnni_value_position(const KvFormat& f, int channel) {
  const int in_chunk = channel % kChunk;
  return channel - in_chunk + (f.bits() == 4 ? pair_position<true>(in_chunk) : pair_position<false>(in_chunk));
}

void vnni_weighted_values(const DecodeAttentionArgs& a, int seq, int first_kv_head, int kv_heads, const float* numerators,
                          const float* denominators) {
  const KvFormat& f = a.shape.format;
  const Layout layout(a.shape);
  const int G = a.q_heads / a.shape.kv_heads, hd = f.head_dim, groups = layout.groups, ctx = a.context_lens[seq];
  const std::int32_t* table = a.block_tables + static_cast<std::size_t>(seq) * a.max_blocks_per_seq;
  const std::size_t bytes = layout.vector_bytes, span = bytes * static_cast<std::size_t>(kv_heads);
  // Outputs in vnni_value_position's order ([h][g][hd]) and the zero points' sums in lanes of
  // tokens ([h][g][group][lane]), folded at the end.
  thread_local std::vector<float> acc_storage, zero_storage;
  float* const acc = zeroed_lines(acc_storage, static_cast<std::size_t>(kv_heads) * G * hd);
  float* const zero_sums = zeroed_lines(zero_storage, static_cast<std::size_t>(kv_heads) * G * groups * kLanes);
  // This tile's rows and the next one's (rows past the sequence's end repeat its last, weight 0).
  const std::uint8_t* tiles[2][kTile];
  Rows rows_of(a.v_cache, table, layout, first_kv_head, ctx, 0);
  auto fill = [&](const std::uint8_t** rows, int from) {
    const int n = std::max(0, std::min(kTile, ctx - from));
    for (int j = 0; j < n; ++j, rows_of.next()) rows[j] = rows_of.row();
    for (int j = n; j < kTile && n > 0; ++j) rows[j] = rows[n - 1];
    return n;
  };
  int next_n = fill(tiles[0], 0);
  for (int j = 0; j < next_n; ++j) prefetch_l2(tiles[0][j], span);
  for (int t0 = 0, current = 0; t0 < ctx; t0 += kTile, current ^= 1) {
    const int n = next_n;
    next_n = fill(tiles[current ^ 1], t0 + kTile);
    for (int h = 0; h < kv_heads; ++h) {
      VnniValueTile tile;
      tile.rows = tiles[current];
      tile.offset = static_cast<std::size_t>(h) * bytes;
      tile.tokens = n;
      tile.probs = numerators + static_cast<std::size_t>(h) * G * ctx + t0;
      tile.probs_stride = static_cast<std::size_t>(ctx);
      tile.zero_sums = zero_sums + static_cast<std::size_t>(h) * G * groups * kLanes;
      tile.acc = acc + static_cast<std::size_t>(h) * G * hd;
      tile.prefetch = tiles[current ^ 1];
      tile.prefetch_count = next_n;
      vnni_weigh_tile(f, G, tile);
    }
  }
  float* out = a.out + (static_cast<std::size_t>(seq) * a.q_heads + static_cast<std::size_t>(first_kv_head) * G) * hd;
  // A chunk's channels c and c + 16 from its 32 places in an acc row (vnni_value_position keeps
  // each chunk's channels within its 32 places, in the same order in every chunk).
  alignas(64) std::int32_t where[kChunk];
  for (int c = 0; c < kChunk; ++c) where[c] = vnni_value_position(f, c);
  const __m512i first_half = _mm512_load_si512(where), second_half = _mm512_load_si512(where + kLanes);
  for (int head = 0; head < G * kv_heads; ++head) {  // the query heads, in order
    const __m512 inv = _mm512_set1_ps(1.f / denominators[head]);
    const float* acc_head = acc + static_cast<std::size_t>(head) * hd;
    float* out_head = out + static_cast<std::size_t>(head) * hd;
    for (int c = 0; c < hd; c += kChunk) {  // a chunk lies within one value group (groups of 32, 64, ...)
      const __m512 zero = _mm512_set1_ps(
          _mm512_reduce_add_ps(_mm512_loadu_ps(zero_sums + (static_cast<std::size_t>(head) * groups + c / layout.group) * kLanes)));
      const __m512 lo = _mm512_loadu_ps(acc_head + c), hi = _mm512_loadu_ps(acc_head + c + kLanes);
      _mm512_storeu_ps(out_head + c, _mm512_mul_ps(_mm512_add_ps(_mm512_permutex2var_ps(lo, first_half, hi), zero), inv));
      _mm512_storeu_ps(out_head + c + kLanes, _mm512_mul_ps(_mm512_add_ps(_mm512_permutex2var_ps(lo, second_half, hi), zero), inv));
    }
  }
}

}  // namespace memtwin::kernels::simd

#else

namespace memtwin::kernels::simd {
bool vnni_value_tile_takes(const KvFormat&, int) { return false; }
void vnni_weigh_tile(const KvFormat&, int, const VnniValueTile&) {}
int vnni_value_position(const KvFormat&, int channel) { return channel; }
void vnni_weighted_values(const DecodeAttentionArgs&, int, int, int, const float*, const float*) {}
}  // namespace memtwin::kernels::simd

#endif
