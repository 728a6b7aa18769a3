// The AVX-512 VNNI decode attention's integer arithmetic: the query rounded to bytes for the key
// scores, and the bounds the rounding of the query and of the values' weights set on the outputs
// (kernels/kv_kernels.h); KIVI's keys scored with rounded weights (kernels/kivi_paged.h). The reference test of every shape is in test_kernels.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/cpu/decode_attention_simd.h"
#include "kernels/kivi.h"
#include "kernels/kv_kernels.h"
#include "tests/unit/kv_test_data.h"

using namespace memtwin::kernels;
using memtwin::test::as_cached;
using memtwin::test::contiguous_cache;
using memtwin::test::format;
using memtwin::test::integer_weight_bound;
using memtwin::test::rounded_query;
using memtwin::test::synthetic_kv;

namespace {

// One sequence of 1,000 tokens of one KV head (head_dim 128, four query heads) in a cache of
// `e`, its blocks in order: the keys and values as given, as cached, and the cache's bytes.
struct OneHead {
  static constexpr int head_dim = 128, q_heads = 4, kv_heads = 1, block_size = 16, max_blocks = 64, ctx = 1000;
  PagedShape shape;
  std::vector<float> k, v, kd, vd;
  std::vector<std::uint8_t> kc, vc;
  std::vector<std::int32_t> table = std::vector<std::int32_t>(max_blocks), context = {ctx};

  OneHead(KvElement e, std::vector<float> keys, std::vector<float> values)
      : shape{max_blocks, block_size, kv_heads, format(e, head_dim, 32)},
        k(std::move(keys)),
        v(std::move(values)),
        kd(as_cached(k, shape.format)),
        vd(as_cached(v, shape.format)),
        kc(contiguous_cache(shape, k)),
        vc(contiguous_cache(shape, v)) {
    std::iota(table.begin(), table.end(), 0);
  }
  // Keys with outlier channels, values without, a vector for every slot of the cache.
  static std::vector<float> keys(std::uint32_t seed) { return synthetic_kv(slots(), head_dim, seed, true); }
  static std::vector<float> values(std::uint32_t seed) { return synthetic_kv(slots(), head_dim, seed, false); }
  static std::size_t slots() { return static_cast<std::size_t>(max_blocks) * block_size; }
  [[nodiscard]] DecodeAttentionArgs args(const std::vector<float>& q, std::vector<float>& out) const {
    return make_decode_args(q.data(), kc.data(), vc.data(), table.data(), context.data(), out.data(), 1, q_heads, max_blocks, shape);
  }
  // Attention of query q over the cached keys and values, in double precision.
  [[nodiscard]] std::vector<float> reference(const std::vector<float>& q, float scale) const {
    std::vector<float> out(q.size());
    reference_decode_attention(q.data(), kd.data(), vd.data(), context.data(), 1, max_blocks * block_size, q_heads, kv_heads, head_dim,
                               scale, out.data());
    return out;
  }
};

double largest_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
  return worst;
}

}  // namespace

TEST_CASE("the query rounded to bytes: high codes within +-127, the largest exact, every element within 1/256 of a step", "[unit]") {
  std::vector<float> q = {0.5f, -1.f, 0.25f, 0.f, 1e-3f, -0.75f, 0.1f, 0.3f,  // one group of 8
                          0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f,               // a zero group
                          3.f, 1.5f, -3.f, 0.f, 2.f, -2.f, 0.01f, 1.f};
  std::vector<std::int8_t> high(q.size()), low(q.size());
  std::vector<float> scales(3);
  round_query_to_bytes(q.data(), static_cast<int>(q.size()), 8, high.data(), low.data(), scales.data());
  CHECK(scales[0] == 1.f / 127.f);
  CHECK(high[1] == -127);  // the largest magnitude takes the whole range
  CHECK(low[1] == 0);
  CHECK(high[0] == 64);  // 63.5 steps: the tie rounds to even, and the low byte takes the half back
  CHECK(low[0] == -127);  // -128 clamped
  CHECK(scales[1] == 0.f);
  CHECK(std::all_of(high.begin() + 8, high.begin() + 16, [](std::int8_t c) { return c == 0; }));
  CHECK(std::all_of(low.begin() + 8, low.begin() + 16, [](std::int8_t c) { return c == 0; }));
  CHECK(high[16] == 127);
  CHECK(high[18] == -127);
  for (std::size_t i = 0; i < q.size(); ++i) {
    INFO("element " << i);
    CHECK(std::fabs(q[i] - scales[i / 8] * (high[i] + low[i] / 256.f)) <= scales[i / 8] / 256.f * (1 + 1e-5f));
  }
  CHECK_THROWS_WITH(round_query_to_bytes(q.data(), 24, 5, high.data(), low.data(), scales.data()), Catch::Contains("must divide"));
}

TEST_CASE("the VNNI K pass rounds the query to the same bytes and scales as round_query_to_bytes", "[unit]") {
  if (!memtwin::kernels::simd::avx512_vnni_supported()) {
    WARN("this CPU has no AVX-512 VNNI: its copy of the rounding is not run here");
    return;
  }
  // Ordinary values, ties of a step and of a low byte, clamped low bytes, a zero group and one
  // whose scale underflows, in groups of 32, 64 and 128.
  std::vector<float> q = synthetic_kv(4, 128, 7, true);
  for (int i = 0; i < 32; ++i) q[32 + i] = 0.f;
  for (int i = 0; i < 32; ++i) q[64 + i] = 1e-40f * static_cast<float>(i % 3);
  q[96] = 127.f;
  q[97] = 63.5f;
  q[98] = -0.5f;
  q[99] = 1.f + 1.f / 512.f;
  for (const int group : {32, 64, 128}) {
    INFO("group " << group);
    const int n = static_cast<int>(q.size()), groups = n / group;
    std::vector<std::int8_t> high(q.size()), low(q.size()), vnni_high(q.size()), vnni_low(q.size());
    std::vector<float> scales(groups), vnni_scales(groups);
    round_query_to_bytes(q.data(), n, group, high.data(), low.data(), scales.data());
    memtwin::kernels::simd::vnni_round_query_to_bytes(q.data(), n, group, vnni_high.data(), vnni_low.data(), vnni_scales.data());
    CHECK(vnni_high == high);
    CHECK(vnni_low == low);
    CHECK(std::memcmp(vnni_scales.data(), scales.data(), scales.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("integer key scores stay within the bound the rounded query sets", "[unit]") {
  // Against the exact query, the rounding moves each score by at most delta = scale x max_t |(q - q') . k_t|,
  // so each probability by a factor within exp(+-2 delta) and each output by at most (exp(2 delta) - 1) max|v|.
  for (KvElement e : {KvElement::int8, KvElement::int4}) {
    const OneHead c(e, OneHead::keys(11), OneHead::values(12));
    const auto q = synthetic_kv(OneHead::q_heads, OneHead::head_dim, 13, true);
    std::vector<float> out(q.size());
    const auto args = c.args(q, out);
    if (!scores_against_rounded_query(args, cpu_simd_level())) {
      WARN("this CPU has no AVX-512 VNNI: the integer key scores were not checked");
      return;
    }
    const std::vector<float> q_rounded = rounded_query(q, 32);
    double delta = 0, largest_value = 0;
    for (int h = 0; h < OneHead::q_heads; ++h)
      for (int t = 0; t < OneHead::ctx; ++t) {
        double moved = 0;
        for (int i = 0; i < OneHead::head_dim; ++i) {
          const std::size_t qi = static_cast<std::size_t>(h) * OneHead::head_dim + i;
          moved += (static_cast<double>(q[qi]) - q_rounded[qi]) * c.kd[static_cast<std::size_t>(t) * OneHead::head_dim + i];
        }
        delta = std::max(delta, std::fabs(moved) * args.scale);
      }
    for (int i = 0; i < OneHead::ctx * OneHead::head_dim; ++i)
      largest_value = std::max(largest_value, static_cast<double>(std::fabs(c.vd[i])));
    const std::vector<float> exact = c.reference(q, args.scale);
    decode_attention(args);
    const double worst = largest_difference(out, exact);
    const double bound = std::expm1(2 * delta) * largest_value + 1e-5;
    INFO("bits " << c.shape.format.bits() << ": scores moved by at most " << delta << ", outputs by " << worst << ", bound " << bound);
    CHECK(worst <= bound);
    CHECK(worst > 0);  // the rounding is visible: this is not the exact query's path
    CHECK(delta < 5e-3);  // and small, with outlier channels in both the query and the keys (one byte: 0.25-0.4)
  }
}

TEST_CASE("integer-weighted values stay within the bound their rounding sets", "[unit]") {
  // kv_kernels.h, kIntegerWeightTile: each output within tile / 65534 of the largest group range
  // of the output with exact weights. Against the reference with the same rounded query, so only
  // the values' weights differ: two heads attend mostly to one token (a tenth of its key as the
  // query: the other tokens' weights then small beside it in their tiles), two diffusely.
  for (KvElement e : {KvElement::int8, KvElement::int4}) {
    const OneHead c(e, OneHead::keys(21), OneHead::values(22));
    auto q = synthetic_kv(OneHead::q_heads, OneHead::head_dim, 23, false);
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < OneHead::head_dim; ++i)
        q[static_cast<std::size_t>(h) * OneHead::head_dim + i] = 0.1f * c.k[static_cast<std::size_t>(417 + h) * OneHead::head_dim + i];
    const int stride = OneHead::max_blocks * OneHead::block_size;
    std::vector<float> out(q.size()), weights(static_cast<std::size_t>(OneHead::q_heads) * stride);
    auto args = c.args(q, out);
    if (!scores_against_rounded_query(args, cpu_simd_level())) {
      WARN("this CPU has no AVX-512 VNNI: the integer-weighted values were not checked");
      return;
    }
    const std::vector<float> rounded = c.reference(rounded_query(q, 32), args.scale);
    args.probs = weights.data();
    args.probs_stride = stride;
    decode_attention(args);
    const double largest_weight = *std::max_element(weights.begin(), weights.begin() + OneHead::ctx);
    const double worst = largest_difference(out, rounded);
    const double bound = integer_weight_bound(c.vd, c.shape.format);
    INFO("bits " << c.shape.format.bits() << ": outputs moved by at most " << worst << ", bound " << bound
                 << "; the first head's largest probability " << largest_weight);
    CHECK(largest_weight > 0.5);  // the concentrated heads are concentrated
    CHECK(worst <= bound);
    CHECK(worst > 0);  // the rounding is visible: this is not the floating-point V pass
  }
}

TEST_CASE("KIVI's integer key scores stay within the bound their rounding sets", "[unit]") {
  // kivi_paged.h: each weight q_c s_c rounded to 16 bits per run of kKiviKeyWeightRun channels
  // moves a score by at most run / 65534 x sum over the runs of max |q_c| x range_c, times the
  // scale. One key group of 64 tokens with outlier channels, four query heads with outliers too.
  using memtwin::kernels::simd::KiviKeyGroup;
  for (int bits : {4, 8}) {
    KiviPagedShape s;
    s.head_dim = 128;
    s.group = 64;
    s.bits = bits;
    const int hd = s.head_dim, G = s.group, heads = 4;
    if (!memtwin::kernels::simd::avx512_vnni_supported() || !memtwin::kernels::simd::kivi_vnni_keys_take(s, heads)) {
      WARN("this CPU or build has no AVX-512 VNNI: KIVI's integer key scores were not checked");
      return;
    }
    const auto keys = synthetic_kv(static_cast<std::size_t>(G), hd, 31, true);
    std::vector<std::uint8_t> group(s.key_group_bytes());
    quantize_keys_per_channel(keys.data(), G, hd, bits, group.data());
    std::vector<float> kd(keys.size());
    dequantize_keys_per_channel(group.data(), G, hd, bits, kd.data());
    const std::size_t channel_bytes = group.size() / static_cast<std::size_t>(hd);
    std::vector<float> scale_of(hd), zero_of(hd);
    for (int c = 0; c < hd; ++c) {
      std::uint16_t half[2];
      std::memcpy(half, group.data() + (c + 1) * channel_bytes - 4, 4);
      scale_of[c] = half_to_float(half[0]);
      zero_of[c] = half_to_float(half[1]);
    }
    const auto q = synthetic_kv(heads, hd, 32, true);
    std::vector<float> weights(q.size()), constants(heads), scores(static_cast<std::size_t>(heads) * G);
    for (int h = 0; h < heads; ++h)
      for (int c = 0; c < hd; ++c) {
        weights[h * hd + c] = q[h * hd + c] * scale_of[c];
        constants[h] += q[h * hd + c] * zero_of[c];
      }
    KiviKeyGroup kg;
    kg.keys = group.data();
    kg.channel_bytes = channel_bytes;
    kg.weights = weights.data();
    kg.weights_stride = hd;
    kg.constants = constants.data();
    kg.scores = scores.data();
    kg.scores_stride = G;
    kg.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    memtwin::kernels::simd::kivi_vnni_key_scores(s, heads, kg);
    const double code_max = (1 << bits) - 1;
    double worst_ratio = 0, worst = 0;
    for (int h = 0; h < heads; ++h) {
      double bound = 0;
      for (int run = 0; run < hd; run += kKiviKeyWeightRun) {
        double largest = 0;
        for (int c = run; c < run + kKiviKeyWeightRun; ++c)
          largest = std::max(largest, std::fabs(static_cast<double>(q[h * hd + c])) * scale_of[c] * code_max);
        bound += kKiviKeyWeightRun / 65534.0 * largest;
      }
      for (int t = 0; t < G; ++t) {
        double exact = 0, magnitude = 0;
        for (int c = 0; c < hd; ++c) {
          exact += static_cast<double>(q[h * hd + c]) * kd[static_cast<std::size_t>(t) * hd + c];
          magnitude += std::fabs(static_cast<double>(q[h * hd + c]) * kd[static_cast<std::size_t>(t) * hd + c]);
        }
        const double moved = std::fabs(scores[static_cast<std::size_t>(h) * G + t] - kg.scale * exact);
        const double allowed = kg.scale * (bound + 1e-6 * magnitude);  // and float sums' rounding
        worst = std::max(worst, moved);
        worst_ratio = std::max(worst_ratio, moved / allowed);
      }
    }
    INFO(bits << "-bit keys: scores moved by at most " << worst << ", at most " << worst_ratio << " of their bound");
    CHECK(worst_ratio <= 1.0);
    CHECK(worst > 0);  // the rounding is visible: this is not the floating-point K pass
  }
}
