// The KV formats' conversions and quantisers: fp16 and fp8 e4m3 round trips, group quantisation's
// error bounds, and the vectorised quantisers against the portable ones byte for byte.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/kv_kernels.h"
#include "tests/unit/kv_test_data.h"

using namespace memtwin::kernels;
using memtwin::test::format;
using memtwin::test::synthetic_kv;

TEST_CASE("half conversion round-trips every half value", "[unit]") {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    if (nan) continue;
    REQUIRE(float_to_half(half_to_float(static_cast<std::uint16_t>(h))) == h);
  }
  CHECK(float_to_half(1.0f) == 0x3c00);
  CHECK(float_to_half(65520.f) == 0x7c00);  // rounds to infinity
  CHECK(half_to_float(0x0001) == Approx(5.9604645e-8f));
}

TEST_CASE("fp8 e4m3 conversion: every code round-trips, ties to even, saturation at 448", "[unit]") {
  for (int v = 0; v < 256; ++v) {
    if ((v & 0x7f) == 0x7f) {
      CHECK(std::isnan(e4m3_to_float(static_cast<std::uint8_t>(v))));
      continue;
    }
    REQUIRE(float_to_e4m3(e4m3_to_float(static_cast<std::uint8_t>(v))) == v);
  }
  CHECK(e4m3_to_float(0x7e) == 448.f);          // largest finite
  CHECK(e4m3_to_float(0x01) == std::ldexp(1.f, -9));  // smallest subnormal
  CHECK(e4m3_to_float(0x38) == 1.f);
  CHECK(float_to_e4m3(1000.f) == 0x7e);         // saturates instead of overflowing
  CHECK(float_to_e4m3(-1e30f) == 0xfe);
  CHECK(float_to_e4m3(1.0625f) == 0x38);        // halfway between 1 and 1.125: to the even code
  CHECK(float_to_e4m3(1.1875f) == 0x3a);        // halfway between 1.125 and 1.25: to the even code
  CHECK(float_to_e4m3(std::ldexp(1.5f, -9)) == 0x02);  // subnormal halfway: to even
  // A cache scale divides before storing and multiplies back.
  KvFormat f = format(KvElement::fp8, 64);
  f.fp8_scale = 4.f;
  std::vector<float> x(64, 0.f), y(64);
  x[0] = 1000.f;  // 250 after scaling: in range
  x[1] = 0.3f;
  std::vector<std::uint8_t> bytes(f.vector_bytes());
  CHECK(bytes.size() == 64);
  quantize_vector(x.data(), f, bytes.data());
  dequantize_vector(bytes.data(), f, y.data());
  CHECK(y[0] == Approx(1000.f).epsilon(1.0 / 16));
  CHECK(y[1] == Approx(0.3f).epsilon(1.0 / 16));
}

TEST_CASE("group quantisation: round-trip error within half a step, per bit width", "[unit]") {
  const auto x = synthetic_kv(64, 128, 1, true);
  for (KvElement e : {KvElement::int8, KvElement::int4, KvElement::int2}) {
    const KvFormat f = format(e);
    std::vector<std::uint8_t> bytes(f.vector_bytes());
    std::vector<float> back(128);
    double worst_ratio = 0;
    for (int v = 0; v < 64; ++v) {
      const float* xv = &x[v * 128];
      quantize_vector(xv, f, bytes.data());
      dequantize_vector(bytes.data(), f, back.data());
      for (int g = 0; g < f.groups(); ++g) {
        const float lo = *std::min_element(xv + g * 32, xv + g * 32 + 32);
        const float hi = *std::max_element(xv + g * 32, xv + g * 32 + 32);
        const float step = (hi - lo) / ((1 << f.bits()) - 1);
        for (int i = g * 32; i < g * 32 + 32; ++i) {
          // half a step, plus fp16 rounding of the scale and zero point
          const double bound = 0.5 * step + 1e-3 * (std::fabs(lo) + std::fabs(hi)) + 1e-6;
          worst_ratio = std::max(worst_ratio, std::fabs(back[i] - xv[i]) / bound);
        }
      }
    }
    INFO("bits " << f.bits());
    CHECK(worst_ratio <= 1.0);
  }
}

TEST_CASE("the vectorised quantiser writes the portable one's bytes, ties and outliers included", "[unit]") {
  if (!decode_attention_simd_available()) WARN("this CPU has no AVX2: both calls run the portable quantiser");
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> pick(0, 255);
  for (int head_dim : {64, 128, 256}) {
    for (int group : {32, 64}) {
      for (KvElement e : {KvElement::int8, KvElement::int4, KvElement::int2}) {
        const KvFormat f = format(e, head_dim, group);
        auto x = synthetic_kv(200, head_dim, 17 + head_dim + group, true);
        // Exact ties: a group spanning 0 .. levels/4 has scale 1/4 and zero 0, so (k + 0.5) / 4
        // lands halfway between two codes (lround takes the upper one); and a constant group.
        const int levels = (1 << f.bits()) - 1;
        for (int i = 0; i < group; ++i) x[i] = i == 0 ? 0.f : i == 1 ? levels / 4.f : (pick(rng) % levels + 0.5f) / 4.f;
        for (int i = 0; i < group; ++i) x[head_dim + i] = 3.25f;
        std::vector<std::uint8_t> fast(f.vector_bytes()), portable(f.vector_bytes());
        int differing = 0;
        for (int v = 0; v < 200; ++v) {
          quantize_vector(&x[static_cast<std::size_t>(v) * head_dim], f, fast.data());
          quantize_vector(&x[static_cast<std::size_t>(v) * head_dim], f, portable.data(), false);
          differing += fast != portable;
        }
        INFO("head_dim " << head_dim << ", group " << group << ", " << f.bits() << " bits");
        CHECK(differing == 0);
      }
    }
  }
  // fp8: every e4m3 value and every midpoint between neighbours (ties to even), both signs, values
  // past 448 and infinities (saturated), NaN, through a cache scale of 0.25.
  std::vector<float> special;
  for (int code = 0; code < 0x7f; ++code) {
    const float v = e4m3_to_float(static_cast<std::uint8_t>(code));
    const float next = code < 0x7e ? e4m3_to_float(static_cast<std::uint8_t>(code + 1)) : 480.f;
    for (float s : {1.f, -1.f}) special.insert(special.end(), {s * v, s * (v + next) / 2});
  }
  special.insert(special.end(), {1e6f, -1e6f, 449.f, 464.f, INFINITY, -INFINITY, NAN, 1e-30f});
  KvFormat fp8 = format(KvElement::fp8, 64);
  fp8.fp8_scale = 0.25f;
  special.resize((special.size() + 63) / 64 * 64, 0.f);
  std::vector<std::uint8_t> fast(64), portable(64);
  int differing = 0;
  for (std::size_t v = 0; v < special.size(); v += 64) {
    std::vector<float> x(special.begin() + static_cast<long>(v), special.begin() + static_cast<long>(v) + 64);
    for (auto& e : x) e *= 0.25f;  // the cache's scale divides it back out exactly
    quantize_vector(x.data(), fp8, fast.data());
    quantize_vector(x.data(), fp8, portable.data(), false);
    for (int i = 0; i < 64; ++i) differing += fast[i] != portable[i];
  }
  CHECK(differing == 0);
  // fp16: every half value and every midpoint between neighbours (ties to even), subnormals and
  // their midpoints, overflow past 65504 (to infinity) and the smallest values (to zero).
  std::vector<float> halves;
  for (std::uint32_t h = 0; h < 0x7c00; ++h) {
    const float v = half_to_float(static_cast<std::uint16_t>(h));
    const float next = half_to_float(static_cast<std::uint16_t>(h + 1));  // 0x7c00: infinity
    const float mid = h + 1 < 0x7c00 ? (v + next) / 2 : 65520.f;
    for (float s : {1.f, -1.f}) halves.insert(halves.end(), {s * v, s * mid});
  }
  halves.insert(halves.end(), {1e6f, -1e6f, 65519.f, 1e-30f, -1e-30f, 2.98e-8f, 2.99e-8f});
  halves.resize((halves.size() + 127) / 128 * 128, 0.f);
  const KvFormat fp16 = format(KvElement::fp16, 128);
  std::vector<std::uint8_t> fast16(256), portable16(256);
  differing = 0;
  for (std::size_t v = 0; v < halves.size(); v += 128) {
    quantize_vector(&halves[v], fp16, fast16.data());
    quantize_vector(&halves[v], fp16, portable16.data(), false);
    differing += fast16 != portable16;
  }
  CHECK(differing == 0);
}
