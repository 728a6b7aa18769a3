// KIVI's K pass for 8- and 4-bit keys with AVX-512 VNNI (vpdpwssd: sixteen lanes, each adding two
// signed 16-bit products to a 32-bit sum), as llama.cpp's CPU backend dots quantised blocks against
// activations rounded to integers. Compiled with VNNI (this file alone); the AVX-512 KIVI kernel
// calls it only on CPUs that have it.
//
// A key group stores each channel c's G codes with one scale s_c and zero point z_c, so
//   q . k_t = sum_c (q_c s_c) code_ct + sum_c q_c z_c.
// The second sum is the caller's, in floating point. The weights w_c = q_c s_c are rounded to
// 16-bit fixed point per run of kKiviKeyWeightRun (32) channels on a scale of their own (the run's
// largest |w_c| over 32767; kivi_paged.h states the bound this sets). Two channels' codes sit in each
// 32-bit lane, one token per lane, so one vpdpwssd adds two channels' products to sixteen tokens'
// scores of a query head; a run's integer sums (at most 32 x 255 x 32767, within 32 bits) are
// scaled into the floating-point scores once per run. The floating-point K pass spends a widening
// of each code and a multiply-add per channel, token and query head: twice the instructions, on
// the same ports.
#include "kernels/cpu/decode_attention_simd.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__) && defined(__AVX512VNNI__) && defined(__FMA__) && defined(__F16C__)

#include <type_traits>
#include <utility>

#include "kernels/cpu/avx512_vectors.h"
#include "kernels/cpu/vnni_vectors.h"

namespace memtwin::kernels::simd {

namespace {

using namespace avx512;
using namespace vnni;

constexpr int kRun = kKiviKeyWeightRun;  // channels whose weights share a scale: two vectors
constexpr int kPairs = kRun / 2;
static_assert(kRun == 2 * kLanes && kPairs == 16, "a run's weights pack two vectors into one (word_of_pair)");
constexpr int kMaxRuns = 8;  // head_dim 256
constexpr int kTokens = 32;  // tokens scored at a time: pair_codes's 32 elements
constexpr float kSteps = 32767.f;

// A group's rounded weights, two channels a word (word_of_pair), and what a unit of each stands
// for, per query head and run.
template <int H>
struct RoundedWeights {
  alignas(64) std::int32_t words[H][kMaxRuns][kPairs];
  alignas(64) float unit[(H * kMaxRuns + kLanes - 1) / kLanes * kLanes];  // [h][run], runs of this head_dim apart
};

template <int H>
void round_weights(const KiviKeyGroup& g, int runs, RoundedWeights<H>& out) {
  auto weights = [&](int h, int r) { return g.weights + static_cast<std::size_t>(h) * g.weights_stride + r * kRun; };
  alignas(64) float inverse[sizeof(out.unit) / sizeof(float)];
  const __m512 sign = _mm512_set1_ps(-0.f);
  // Each run's largest magnitude ([h][run] in order), sixteen runs at a time; a unit of its
  // weights: largest / kSteps. Runs whose weights are all below a float's smallest normal weigh
  // nothing.
  for (int first = 0, h = 0, r = 0; first < H * runs; first += kLanes) {
    __m512 largest_of[kLanes];
    for (int i = 0; i < kLanes; ++i) {
      if (h == H) {
        largest_of[i] = _mm512_setzero_ps();
        continue;
      }
      const float* w = weights(h, r);
      largest_of[i] = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_loadu_ps(w)), _mm512_andnot_ps(sign, _mm512_loadu_ps(w + kLanes)));
      if (++r == runs) r = 0, ++h;
    }
    const __m512 largest = horizontal16(largest_of, [](__m512 x, __m512 y) { return _mm512_max_ps(x, y); });
    _mm512_store_ps(inverse + first, _mm512_maskz_div_ps(_mm512_cmp_ps_mask(largest, _mm512_set1_ps(1e-37f), _CMP_GE_OQ),
                                                         _mm512_set1_ps(kSteps), largest));
    _mm512_store_ps(out.unit + first, _mm512_div_ps(largest, _mm512_set1_ps(kSteps)));
  }
  for (int h = 0; h < H; ++h)
    for (int r = 0; r < runs; ++r) {
      const float* w = weights(h, r);
      const __m512 inv = _mm512_set1_ps(inverse[h * runs + r]);
      const __m512i low = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(w), inv));
      const __m512i high = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(w + kLanes), inv));
      _mm512_store_si512(out.words[h][r], _mm512_packs_epi32(low, high));  // see word_of_pair
    }
}

template <bool Int4, int H>
void score_group(const KiviPagedShape& s, const KiviKeyGroup& g) {
  const int runs = s.head_dim / kRun, G = s.group;
  RoundedWeights<H> rw;
  round_weights<H>(g, runs, rw);
  const std::size_t cb = g.channel_bytes, tokens_bytes = Int4 ? kTokens / 2 : kTokens;
  const std::size_t lines = (static_cast<std::size_t>(s.head_dim) * cb + 63) / 64;
  alignas(64) std::int32_t in_order[2][kLanes];
  for (int l = 0; l < kLanes; ++l) {
    in_order[0][l] = pair_position<Int4>(l);
    in_order[1][l] = pair_position<Int4>(kLanes + l);
  }
  const __m512 scale = _mm512_set1_ps(g.scale);
  for (int t0 = 0; t0 < G; t0 += kTokens) {
    __m512 sum[H][2];
    for (auto& x : sum) x[0] = x[1] = _mm512_setzero_ps();
    for (int r = 0; r < runs; ++r) {
      // The next group's keys into L2, a share with each run of the first tokens.
      if (g.next_keys && t0 == 0)
        for (std::size_t line = lines * r / runs; line < lines * (r + 1) / runs; ++line)
          _mm_prefetch(reinterpret_cast<const char*>(g.next_keys + 64 * line), _MM_HINT_T1);
      __m512i dot[H][2];
      for (auto& d : dot) d[0] = d[1] = _mm512_setzero_si512();
      const std::uint8_t* codes = g.keys + static_cast<std::size_t>(r * kRun) * cb + static_cast<std::size_t>(t0 / kTokens) * tokens_bytes;
      const std::int32_t* w = rw.words[0][r];
      auto pair = [&]<int J>(std::integral_constant<int, J>) {
        __m512i x[2];
        pair_codes<Int4>(codes + 2 * J * cb, codes + (2 * J + 1) * cb, x);
        [&]<int... Hs>(std::integer_sequence<int, Hs...>) {
          constexpr int span = (H - 1) * kMaxRuns * kPairs + kPairs;  // from this run's words to the last head's
          ((dot[Hs][0] = dot_words<Hs * kMaxRuns * kPairs + word_of_pair(J), span>(dot[Hs][0], x[0], w)), ...);
          ((dot[Hs][1] = dot_words<Hs * kMaxRuns * kPairs + word_of_pair(J), span>(dot[Hs][1], x[1], w)), ...);
        }(std::make_integer_sequence<int, H>{});
      };
      [&]<int... Js>(std::integer_sequence<int, Js...>) {
        (pair(std::integral_constant<int, Js>{}), ...);
      }(std::make_integer_sequence<int, kPairs>{});
      for (int h = 0; h < H; ++h) {
        const __m512 unit = _mm512_set1_ps(rw.unit[h * runs + r]);
        for (int k = 0; k < 2; ++k) sum[h][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[h][k]), unit, sum[h][k]);
      }
    }
    for (int h = 0; h < H; ++h) {
      const __m512 constant = _mm512_set1_ps(g.constants[h]);
      float* out = g.scores + static_cast<std::size_t>(h) * g.scores_stride + t0;
      for (int k = 0; k < 2; ++k)
        _mm512_storeu_ps(out + k * kLanes,
                         _mm512_mul_ps(_mm512_add_ps(_mm512_permutex2var_ps(sum[h][0], _mm512_load_si512(in_order[k]), sum[h][1]), constant),
                                       scale));
    }
  }
}

template <bool Int4>
void score_group_heads(const KiviPagedShape& s, int heads, const KiviKeyGroup& g) {
  switch (heads) {
    case 1: return score_group<Int4, 1>(s, g);
    case 2: return score_group<Int4, 2>(s, g);
    case 3: return score_group<Int4, 3>(s, g);
    case 4: return score_group<Int4, 4>(s, g);
    default: return score_group<Int4, 8>(s, g);
  }
}

}  // namespace

bool kivi_vnni_keys_take(const KiviPagedShape& s, int heads) {
  return (s.bits == 4 || s.bits == 8) && s.group % kTokens == 0 && s.head_dim % kRun == 0 && s.head_dim <= kMaxRuns * kRun &&
         (heads <= 4 || heads == 8);
}

void kivi_vnni_key_scores(const KiviPagedShape& s, int heads, const KiviKeyGroup& g) {
  if (s.bits == 4) {
    score_group_heads<true>(s, heads, g);
  } else {
    score_group_heads<false>(s, heads, g);
  }
}

}  // namespace memtwin::kernels::simd

#else

namespace memtwin::kernels::simd {
bool kivi_vnni_keys_take(const KiviPagedShape&, int) { return false; }
void kivi_vnni_key_scores(const KiviPagedShape&, int, const KiviKeyGroup&) {}
}  // namespace memtwin::kernels::simd

#endif
