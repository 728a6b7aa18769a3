// KIVI in the serving engine's paged pool (kernels/kivi_paged.h) against KiviSequence (one
// sequence, one head, token by token), the decode-attention reference and the size model.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/kivi.h"
#include "kernels/kivi_paged.h"
#include "kernels/kv_kernels.h"
#include "models/kv/kv_methods.h"
#include "tests/unit/kv_test_data.h"

using namespace memtwin::kernels;
using memtwin::test::integer_weight_bound;
using memtwin::test::kivi_integer_key_bound;
using memtwin::test::synthetic_kv;

namespace {

KiviPagedShape kivi_shape(int bits, int head_dim, int residual, int num_blocks) {
  KiviPagedShape s;
  s.num_blocks = num_blocks;
  s.block_size = 32;
  s.kv_heads = 2;
  s.head_dim = head_dim;
  s.bits = bits;
  s.group = 32;
  s.residual = residual;
  return s;
}

}  // namespace

TEST_CASE("the table-free half conversion gives every half's float bit for bit", "[unit]") {
  std::vector<std::uint16_t> all(65536);
  std::iota(all.begin(), all.end(), std::uint16_t{0});
  std::vector<float> out(all.size());
  halves_to_floats(all.data(), static_cast<int>(all.size()), out.data());
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float expected = half_to_float(static_cast<std::uint16_t>(h));
    std::uint32_t a, b;
    std::memcpy(&a, &out[h], 4);
    std::memcpy(&b, &expected, 4);
    INFO("half 0x" << std::hex << h);
    REQUIRE(a == b);
  }
}

TEST_CASE("a paged KIVI sequence uses exactly the bytes of memtwin's size model", "[unit]") {
  for (int bits : {2, 4}) {
    for (int head_dim : {64, 128}) {
      const KiviPagedShape s = kivi_shape(bits, head_dim, 128, 1);
      REQUIRE_NOTHROW(s.validate());
      const int layers = 3;
      const memtwin::KvShape shape{layers, s.kv_heads, head_dim, 2};
      const memtwin::GroupQuantKv model(shape, bits, s.group, true, s.residual);
      // A block's slices over every layer are the scheduler's block (its bytes per stored token).
      CHECK(static_cast<double>(s.slice_bytes()) * layers == model.bytes_per_stored_token() * s.block_size);
      for (std::int64_t n : {0, 1, 127, 128, 159, 160, 161, 192, 1000}) {
        INFO("bits " << bits << ", head_dim " << head_dim << ", " << n << " tokens");
        CHECK(static_cast<double>(s.sequence_bytes(n)) * layers == model.sequence_bytes(n, 0));
        CHECK(s.quantized_tokens(n) == model.quantized_tokens(n));
      }
    }
  }
}

TEST_CASE("a paged KIVI layout refuses blocks a group or a token would straddle", "[unit]") {
  KiviPagedShape s = kivi_shape(2, 128, 128, 4);
  s.block_size = 16;
  CHECK_THROWS_WITH(s.validate(), Catch::Contains("block_size (16) must be a multiple of the group (32)"));
  s.block_size = 32;
  s.residual = 40;
  CHECK_THROWS_WITH(s.validate(), Catch::Contains("residual (40) must be a multiple of the group"));
}

TEST_CASE("paged KIVI appends hold what KiviSequence holds, in chunks, through shrinking blocks", "[unit]") {
  for (int bits : {2, 4}) {
    for (int residual : {0, 64}) {
      const int head_dim = 64, tokens = 400, blocks = 64;
      KiviPagedShape s = kivi_shape(bits, head_dim, residual, blocks);
      const std::size_t row = static_cast<std::size_t>(s.kv_heads) * head_dim;
      const auto k = synthetic_kv(tokens * static_cast<std::size_t>(s.kv_heads), head_dim, 21 + bits, true);
      const auto v = synthetic_kv(tokens * static_cast<std::size_t>(s.kv_heads), head_dim, 31 + bits, false);
      std::vector<KiviSequence> reference;
      for (int h = 0; h < s.kv_heads; ++h) reference.emplace_back(head_dim, bits, s.group, residual);
      // A scattered block table; blocks the sequence no longer needs are scribbled over, as another
      // sequence would, so the append must read a residual that left them from its staged copy.
      std::vector<std::int32_t> table(blocks);
      std::iota(table.begin(), table.end(), 0);
      std::shuffle(table.begin(), table.end(), std::mt19937(5));
      std::vector<std::uint8_t> cache(s.bytes(), 0);
      std::mt19937 rng(7 + bits + residual);
      std::int64_t held = 0;
      while (held < tokens) {
        const int chunk = static_cast<int>(std::min<std::int64_t>(tokens - held, std::uniform_int_distribution<int>(1, 70)(rng)));
        const std::int64_t after = held + chunk;
        std::vector<std::uint16_t> staged(std::max<std::size_t>(1, (held - s.quantized_tokens(held)) * row * 2));
        kivi_stage_residual(cache.data(), table.data(), held, s, staged.data());
        const std::size_t used = (s.sequence_bytes(after) + s.slice_bytes() - 1) / s.slice_bytes();
        for (std::size_t b = used; b < table.size(); ++b) {
          std::fill_n(cache.begin() + static_cast<long>(table[b] * s.slice_bytes()), s.slice_bytes(), std::uint8_t{0x5c});
        }
        const std::int32_t first = static_cast<std::int32_t>(held), added = chunk, cached = static_cast<std::int32_t>(held);
        const std::uint16_t* staged_ptr = staged.data();
        auto a = make_kivi_append_args(k.data(), v.data(), 1, &first, &added, &cached, table.data(), static_cast<int>(used), s,
                                       cache.data());
        a.staged = &staged_ptr;
        kivi_append(a);
        for (std::int64_t t = held; t < after; ++t)
          for (int h = 0; h < s.kv_heads; ++h) reference[h].append(&k[t * row + h * head_dim], &v[t * row + h * head_dim]);
        held = after;
        std::vector<float> keys, values, rk, rv;
        kivi_read_sequence(cache.data(), table.data(), held, s, keys, values);
        for (int h = 0; h < s.kv_heads; ++h) {
          reference[h].read(rk, rv);
          REQUIRE(reference[h].quantized_tokens() == s.quantized_tokens(held));
          for (std::int64_t t = 0; t < held; ++t) {
            INFO("bits " << bits << ", residual " << residual << ", " << held << " tokens, head " << h << ", token " << t);
            REQUIRE(std::equal(rk.begin() + t * head_dim, rk.begin() + (t + 1) * head_dim, keys.begin() + t * row + h * head_dim));
            REQUIRE(std::equal(rv.begin() + t * head_dim, rv.begin() + (t + 1) * head_dim, values.begin() + t * row + h * head_dim));
          }
        }
      }
    }
  }
}

TEST_CASE("paged KIVI decode attention equals attention over the dequantised cache, vectorised and portable", "[unit]") {
  for (int bits : {2, 4, 8}) {
    for (auto [head_dim, q_heads] : {std::pair{64, 4}, {128, 4}, {128, 2}, {64, 6}, {128, 16}}) {  // GQA groups 2, 1, 3, 8
      const int seqs = 3;
      const std::int32_t lens[seqs] = {1, 150, 333};  // residual only; one group; several groups
      const int per_seq = 40;
      KiviPagedShape s = kivi_shape(bits, head_dim, 64, seqs * per_seq);
      const std::size_t row = static_cast<std::size_t>(s.kv_heads) * head_dim;
      std::vector<std::int32_t> tables(static_cast<std::size_t>(seqs) * per_seq);
      std::iota(tables.begin(), tables.end(), 0);
      std::shuffle(tables.begin(), tables.end(), std::mt19937(3));
      std::vector<std::uint8_t> cache(s.bytes(), 0);
      const int max_ctx = 333;
      std::vector<float> kref(static_cast<std::size_t>(seqs) * max_ctx * row, 0.f), vref(kref.size(), 0.f);
      for (int q = 0; q < seqs; ++q) {
        const auto k = synthetic_kv(static_cast<std::size_t>(lens[q]) * s.kv_heads, head_dim, 40 + q, true);
        const auto v = synthetic_kv(static_cast<std::size_t>(lens[q]) * s.kv_heads, head_dim, 50 + q, false);
        const std::int32_t first = 0, cached = 0;
        const auto a = make_kivi_append_args(k.data(), v.data(), 1, &first, &lens[q], &cached,
                                             &tables[static_cast<std::size_t>(q) * per_seq], per_seq, s, cache.data());
        kivi_append(a);
        std::vector<float> keys, values;
        kivi_read_sequence(cache.data(), a.block_tables, lens[q], s, keys, values);
        std::copy(keys.begin(), keys.end(), kref.begin() + static_cast<long>(q) * max_ctx * static_cast<long>(row));
        std::copy(values.begin(), values.end(), vref.begin() + static_cast<long>(q) * max_ctx * static_cast<long>(row));
      }
      const auto query = synthetic_kv(static_cast<std::size_t>(seqs) * q_heads, head_dim, 60, false);
      std::vector<float> out(query.size()), expected(query.size());
      const auto d = make_kivi_decode_args(query.data(), cache.data(), tables.data(), lens, out.data(), seqs, q_heads, per_seq, s);
      reference_decode_attention(query.data(), kref.data(), vref.data(), lens, seqs, max_ctx, q_heads, s.kv_heads, head_dim,
                                 d.scale, expected.data());
      double keys_bound = 0;  // with VNNI the 4- and 8-bit keys are scored with weights rounded to 16 bits
      for (int q = 0; q < seqs; ++q) {
        const std::size_t at = static_cast<std::size_t>(q) * max_ctx * row;
        keys_bound = std::max(keys_bound, kivi_integer_key_bound(&query[static_cast<std::size_t>(q) * q_heads * head_dim], &kref[at],
                                                                 &vref[at], lens[q], s, q_heads, d.scale));
      }
      for (SimdLevel level : kSimdLevels) {
        if (level > cpu_simd_level()) {
          WARN("this CPU has no " << simd_level_name(level) << ": its KIVI kernel was not checked");
          continue;
        }
        std::fill(out.begin(), out.end(), 0.f);
        kivi_decode_attention(d, level);
        double err = 0, norm = 0;
        for (std::size_t i = 0; i < out.size(); ++i) {
          err = std::max(err, static_cast<double>(std::fabs(out[i] - expected[i])));
          norm = std::max(norm, static_cast<double>(std::fabs(expected[i])));
        }
        // With VNNI the 4- and 8-bit values are weighed in 16-bit fixed point: within the bound
        // kv_kernels.h states (kIntegerWeightTile), over the cached values' groups; and the keys'
        // scores within the bound kivi_paged.h states (kKiviKeyWeightRun).
        const bool integers = level >= SimdLevel::avx512_vnni && bits != 2;
        const double integer_bound = integers ? integer_weight_bound(vref, s.value_format()) + keys_bound : 0.0;
        INFO("bits " << bits << ", head_dim " << head_dim << ", " << q_heads << " query heads, "
                     << simd_level_name(level) << ": max error " << err << " of " << norm << ", integer rounding's bound " << integer_bound);
        CHECK(err <= 1e-4 * norm + integer_bound);
      }
    }
  }
}

TEST_CASE("paged KIVI decode attention of one long sequence, its KV heads split between threads, equals the portable kernel",
          "[unit]") {
  // Enough work for the threads (tokens x KV heads past 4096), a single sequence: with more
  // threads than sequences the vectorised kernel gives each thread a range of the KV heads.
  const int head_dim = 64, q_heads = 8, tokens = 2500;
  KiviPagedShape s = kivi_shape(4, head_dim, 64, 1);
  const int blocks = static_cast<int>((s.sequence_bytes(tokens) + s.slice_bytes() - 1) / s.slice_bytes());
  s.num_blocks = blocks;
  std::vector<std::int32_t> table(static_cast<std::size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(9));
  std::vector<std::uint8_t> cache(s.bytes(), 0);
  const auto k = synthetic_kv(static_cast<std::size_t>(tokens) * s.kv_heads, head_dim, 70, true);
  const auto v = synthetic_kv(static_cast<std::size_t>(tokens) * s.kv_heads, head_dim, 71, false);
  const std::int32_t first = 0, cached = 0, len = tokens;
  kivi_append(make_kivi_append_args(k.data(), v.data(), 1, &first, &len, &cached, table.data(), blocks, s, cache.data()));
  const auto query = synthetic_kv(q_heads, head_dim, 72, false);
  std::vector<float> split(query.size()), portable(query.size());
  // With VNNI the vectorised kernel takes 4-bit keys and values in integers: within the bounds
  // kivi_paged.h and kv_kernels.h state.
  double integer_bound = 0;
  if (cpu_simd_level() >= SimdLevel::avx512_vnni) {
    std::vector<float> keys, values;
    kivi_read_sequence(cache.data(), table.data(), tokens, s, keys, values);
    const float scale = make_kivi_decode_args(query.data(), cache.data(), table.data(), &len, split.data(), 1, q_heads, blocks, s).scale;
    integer_bound = kivi_integer_key_bound(query.data(), keys.data(), values.data(), tokens, s, q_heads, scale) +
                    integer_weight_bound(values, s.value_format());
  }
  kivi_decode_attention(make_kivi_decode_args(query.data(), cache.data(), table.data(), &len, split.data(), 1, q_heads, blocks, s));
  kivi_decode_attention(make_kivi_decode_args(query.data(), cache.data(), table.data(), &len, portable.data(), 1, q_heads, blocks, s),
                        false);
  double err = 0, norm = 0;
  for (std::size_t i = 0; i < split.size(); ++i) {
    err = std::max(err, static_cast<double>(std::fabs(split[i] - portable[i])));
    norm = std::max(norm, static_cast<double>(std::fabs(portable[i])));
  }
  INFO("max difference " << err << " of " << norm << ", integer rounding's bound " << integer_bound);
  CHECK(norm > 0);
  CHECK(err <= 1e-4 * norm + integer_bound);
#ifdef _OPENMP
  // On one thread the vectorised kernel attends all the KV heads itself, with the same arithmetic
  // per head: the same bits (kernels/cpu/thread_policy.h runs a call either way).
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<float> one(query.size());
  kivi_decode_attention(make_kivi_decode_args(query.data(), cache.data(), table.data(), &len, one.data(), 1, q_heads, blocks, s));
  omp_set_num_threads(threads);
  CHECK(std::memcmp(one.data(), split.data(), one.size() * sizeof(float)) == 0);
#else
  WARN("built without OpenMP: one thread only, the split and one-thread outputs were not compared");
#endif
}
