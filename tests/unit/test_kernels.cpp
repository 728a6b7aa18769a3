// CPU KV kernels against naive references and against memtwin's size model.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include <fstream>

#include <nlohmann/json.hpp>

#include "kernels/kv_kernels.h"
#include "kernels/eviction.h"
#include "kernels/kivi.h"
#include "kernels/kv_quality.h"
#include "tests/test_support.h"
#include "tests/unit/kv_test_data.h"
#include "models/kv/kv_methods.h"

using namespace memtwin::kernels;
using memtwin::test::format;
using memtwin::test::integer_weight_bound;
using memtwin::test::as_cached;
using memtwin::test::rounded_query;
using memtwin::test::synthetic_kv;

TEST_CASE("kernel bytes equal memtwin's size model for every quantised format", "[unit]") {
  const memtwin::KvShape shape{32, 8, 128, 2};
  for (auto [e, bits] : {std::pair{KvElement::int8, 8}, {KvElement::int4, 4}, {KvElement::int2, 2}}) {
    const KvFormat f = format(e);
    memtwin::GroupQuantKv model(shape, bits, 32, false, 0);
    CHECK(static_cast<double>(f.vector_bytes()) * 2 * shape.layers * shape.kv_heads == model.bytes_per_stored_token());
    CHECK(static_cast<double>(f.vector_bytes()) * 2 * shape.layers * shape.kv_heads * 1000 == model.sequence_bytes(1000, 0));
  }
  memtwin::FullPrecisionKv fp16(shape);
  CHECK(static_cast<double>(format(KvElement::fp16).vector_bytes()) * 2 * 32 * 8 == fp16.bytes_per_stored_token());
  memtwin::FullPrecisionKv fp8(memtwin::KvShape{32, 8, 128, 1});  // kv_cache.dtype fp8
  CHECK(static_cast<double>(format(KvElement::fp8).vector_bytes()) * 2 * 32 * 8 == fp8.bytes_per_stored_token());
}

TEST_CASE("the paged layout round-trips through a scattered block table", "[unit]") {
  PagedShape shape;
  shape.num_blocks = 16;
  shape.block_size = 16;
  shape.kv_heads = 4;
  shape.format = format(KvElement::int4, 64, 32);
  const int tokens = 100;
  const auto x = synthetic_kv(static_cast<std::size_t>(tokens) * shape.kv_heads, 64, 2, false);
  std::vector<std::int64_t> slots(tokens);
  const int blocks[] = {9, 3, 14, 0, 7, 11, 5};  // logical block i lives in physical block blocks[i]
  for (int t = 0; t < tokens; ++t) slots[t] = blocks[t / 16] * 16 + t % 16;
  std::vector<std::uint8_t> cache(shape.bytes(), 0xAB);
  write_paged(x.data(), slots.data(), tokens, shape, cache.data());
  std::vector<std::uint8_t> direct(shape.format.vector_bytes());
  for (int t = 0; t < tokens; ++t) {
    for (int h = 0; h < shape.kv_heads; ++h) {
      quantize_vector(&x[(static_cast<std::size_t>(t) * shape.kv_heads + h) * 64], shape.format, direct.data());
      const std::uint8_t* stored = cache.data() + shape.offset(blocks[t / 16], t % 16, h);
      REQUIRE(std::equal(direct.begin(), direct.end(), stored));
    }
  }
}

TEST_CASE("decode attention matches the naive reference (fp16, fp8, int8, int4 - GQA 1-8 - head_dim 64/128/256)", "[unit]") {
  for (int head_dim : {64, 128, 256}) {
    for (KvElement e : {KvElement::fp16, KvElement::fp8, KvElement::int8, KvElement::int4}) {
     for (int gqa : {1, 2, 4, 8}) {  // query heads per KV head: the vectorised kernels block tokens by it
      const int seqs = 3, kv_heads = 2, q_heads = kv_heads * gqa, block_size = 16, max_blocks = 40;
      const std::vector<std::int32_t> context = {1, 257, 600};
      PagedShape shape{seqs * max_blocks, block_size, kv_heads, format(e, head_dim, 32)};
      const int max_context = max_blocks * block_size;
      const auto k = synthetic_kv(static_cast<std::size_t>(seqs) * max_context * kv_heads, head_dim, 3, true);
      const auto v = synthetic_kv(static_cast<std::size_t>(seqs) * max_context * kv_heads, head_dim, 4, false);
      const auto q = synthetic_kv(static_cast<std::size_t>(seqs) * q_heads, head_dim, 5, false);
      std::vector<std::uint8_t> kc(shape.bytes()), vc(shape.bytes());
      std::vector<std::int32_t> table(seqs * max_blocks);
      for (int i = 0; i < seqs * max_blocks; ++i) table[i] = (i * 7) % (seqs * max_blocks);  // scattered blocks
      for (int s = 0; s < seqs; ++s) {
        std::vector<std::int64_t> slots(max_context);
        for (int t = 0; t < max_context; ++t) slots[t] = table[s * max_blocks + t / block_size] * block_size + t % block_size;
        const std::size_t base = static_cast<std::size_t>(s) * max_context * kv_heads * head_dim;
        write_paged(&k[base], slots.data(), max_context, shape, kc.data());
        write_paged(&v[base], slots.data(), max_context, shape, vc.data());
      }
      // The reference sees what the cache holds: the dequantised values.
      const std::vector<float> kd = as_cached(k, shape.format), vd = as_cached(v, shape.format);
      const float scale = 1.f / std::sqrt(static_cast<float>(head_dim));
      std::vector<float> out(static_cast<std::size_t>(seqs) * q_heads * head_dim), exact(out.size()), rounded(out.size());
      reference_decode_attention(q.data(), kd.data(), vd.data(), context.data(), seqs, max_context, q_heads, kv_heads,
                                 head_dim, scale, exact.data());
      // Where the keys are scored by integer dot products: against the query as round_query_to_bytes rounds it.
      const std::vector<float> q_rounded = rounded_query(q, 32);
      reference_decode_attention(q_rounded.data(), kd.data(), vd.data(), context.data(), seqs, max_context, q_heads, kv_heads,
                                 head_dim, scale, rounded.data());
      // The portable kernel, and each vectorised one this CPU has.
      for (SimdLevel level : kSimdLevels) {
        if (level > cpu_simd_level()) {
          WARN("this CPU has no " << simd_level_name(level) << ": its decode attention was not checked");
          continue;
        }
        const DecodeAttentionArgs args = make_decode_args(q.data(), kc.data(), vc.data(), table.data(), context.data(),
                                                          out.data(), seqs, q_heads, max_blocks, shape);
        const bool integer_scores = scores_against_rounded_query(args, level);
        // Only the integer formats take that path, at the VNNI level, the Llama-3-8B shape among them.
        if (integer_scores) CHECK((level == SimdLevel::avx512_vnni && shape.format.quantized()));
        if (level == SimdLevel::avx512_vnni && shape.format.quantized() && head_dim == 128 && gqa == 4) CHECK(integer_scores);
        const std::vector<float>& ref = integer_scores ? rounded : exact;
        // The integer path's values weighed in fixed point: within the bound kv_kernels.h states.
        const double weights_bound = integer_scores ? integer_weight_bound(vd, shape.format) : 0.0;
        decode_attention(args, level);
        double worst = 0;
        for (std::size_t i = 0; i < out.size(); ++i)
          worst = std::max(worst, static_cast<double>(std::fabs(out[i] - ref[i]) - weights_bound) / (1 + std::fabs(ref[i])));
        INFO("head_dim " << head_dim << " bits " << shape.format.bits() << " GQA " << gqa << " " << simd_level_name(level));
        CHECK(worst < 1e-4);
        // The last sequence alone: with more threads than sequences the vectorised kernel splits
        // the sequence's KV heads between them.
        const std::size_t q_at = static_cast<std::size_t>(seqs - 1) * q_heads * head_dim;
        std::vector<float> alone(static_cast<std::size_t>(q_heads) * head_dim);
        decode_attention(make_decode_args(q.data() + q_at, kc.data(), vc.data(), table.data() + (seqs - 1) * max_blocks,
                                          context.data() + seqs - 1, alone.data(), 1, q_heads, max_blocks, shape),
                         level);
        double worst_alone = 0;
        for (std::size_t i = 0; i < alone.size(); ++i)
          worst_alone = std::max(worst_alone, static_cast<double>(std::fabs(alone[i] - ref[q_at + i]) - weights_bound) /
                                                  (1 + std::fabs(ref[q_at + i])));
        CHECK(worst_alone < 1e-4);
      }
     }
    }
  }
}

TEST_CASE("launchers reject misuse with a clear error", "[unit]") {
  DecodeAttentionArgs a;
  float dummy = 0;
  std::int32_t one = 1;
  std::uint8_t byte = 0;
  a.query = a.out = &dummy;
  a.k_cache = a.v_cache = &byte;
  a.block_tables = a.context_lens = &one;
  a.num_seqs = 1;
  a.q_heads = 6;
  a.max_blocks_per_seq = 1;
  a.scale = 1;
  a.shape.kv_heads = 4;
  a.shape.format = format(KvElement::int4);
  CHECK_THROWS_WITH(validate(a), Catch::Contains("multiple of kv_heads"));
  a.q_heads = 8;
  a.shape.format.head_dim = 96;
  CHECK_THROWS_WITH(validate(a), Catch::Contains("head_dim must be 64, 128 or 256"));
  a.shape.format.head_dim = 128;
  a.shape.format.group = 48;
  CHECK_THROWS_WITH(validate(a), Catch::Contains("must divide head_dim"));
}

TEST_CASE("memtwin kernels - fewer bits, more error and less overlap - bytes as the size model says", "[unit]") {
  auto r = memtwin::test::run_memtwin({"kernels", "--tokens", "512", "--json"});
  REQUIRE(r.exit_code == 0);
  auto doc = nlohmann::json::parse(r.out);
  CHECK(doc["size_model_agrees"] == true);
  const auto& all = doc["formats"];
  REQUIRE(all.size() == 5);
  REQUIRE(all[1]["format"] == "fp8");
  // fp16, then the integer formats by falling bit width: each step loses more and saves more.
  const std::vector<nlohmann::json> f = {all[0], all[2], all[3], all[4]};
  for (std::size_t i = 1; i < f.size(); ++i) {
    CHECK(f[i]["key_error"].get<double>() > f[i - 1]["key_error"].get<double>());
    CHECK(f[i]["attention_output_error"].get<double>() > f[i - 1]["attention_output_error"].get<double>());
    CHECK(f[i]["topk_overlap"].get<double>() <= f[i - 1]["topk_overlap"].get<double>());
    CHECK(f[i]["compression"].get<double>() > f[i - 1]["compression"].get<double>());
  }
  CHECK(f[0]["topk_overlap"].get<double>() > 0.99);  // fp16 keeps the ranking
  // fp8 halves the bytes exactly and loses more than fp16 (3 mantissa bits against 10).
  CHECK(all[1]["compression"].get<double>() == 2.0);
  CHECK(all[1]["key_error"].get<double>() > f[0]["key_error"].get<double>());
}

TEST_CASE("KV tensors load from .npy files", "[unit]") {
  // A float32 array [3, 2, 64] written by hand in NumPy's format 1.0.
  const std::string path = "/tmp/memtwin-test-k.npy";
  {
    std::ofstream out(path, std::ios::binary);
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2, 64), }";
    while ((10 + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    out.write("\x93NUMPY\x01\x00", 8);
    const std::uint16_t len = static_cast<std::uint16_t>(header.size());
    out.write(reinterpret_cast<const char*>(&len), 2);
    out << header;
    for (int i = 0; i < 3 * 2 * 64; ++i) {
      const float v = static_cast<float>(i) * 0.5f;
      out.write(reinterpret_cast<const char*>(&v), 4);
    }
  }
  const auto t = memtwin::kernels::read_npy(path);
  CHECK(t.tokens == 3);
  CHECK(t.kv_heads == 2);
  CHECK(t.head_dim == 64);
  CHECK(t.data[100] == 50.f);
  auto r = memtwin::test::run_memtwin({"kernels", "--keys", path, "--values", path, "--q-heads", "4", "--topk", "2"});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("npy KV: 3 tokens"));
  auto bad = memtwin::test::run_memtwin({"kernels", "--keys", "/no/such.npy", "--values", path});
  CHECK(bad.exit_code == 2);
}

TEST_CASE("KV tensors load from safetensors files, F16 and BF16, picked by name", "[unit]") {
  // Two tensors [4, 2, 64]: K in F16, V in BF16, written by hand in the safetensors layout.
  const std::string path = "/tmp/memtwin-test-kv.safetensors";
  const int n = 4 * 2 * 64;
  {
    const std::string header = R"({"K":{"dtype":"F16","shape":[4,2,64],"data_offsets":[0,)" + std::to_string(2 * n) +
                               R"(]},"V":{"dtype":"BF16","shape":[4,2,64],"data_offsets":[)" + std::to_string(2 * n) +
                               "," + std::to_string(4 * n) + R"(]},"__metadata__":{"format":"pt"}})";
    std::ofstream out(path, std::ios::binary);
    const std::uint64_t len = header.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << header;
    for (int i = 0; i < n; ++i) {
      const std::uint16_t h = float_to_half(static_cast<float>(i % 64) * 0.25f);
      out.write(reinterpret_cast<const char*>(&h), 2);
    }
    for (int i = 0; i < n; ++i) {
      const float f = -static_cast<float>(i % 64);  // small integers: exact in bfloat16
      std::uint32_t bits;
      std::memcpy(&bits, &f, 4);
      const std::uint16_t b = static_cast<std::uint16_t>(bits >> 16);
      out.write(reinterpret_cast<const char*>(&b), 2);
    }
  }
  auto r = memtwin::test::run_memtwin({"kernels", "--keys", path + ":K", "--values", path + ":V", "--q-heads", "4",
                                       "--topk", "2", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  CHECK(doc["source"] == "safetensors");
  CHECK(doc["tokens"] == 4);
  CHECK(doc["kv_heads"] == 2);
  CHECK(doc["head_dim"] == 64);
  CHECK(doc["formats"][0]["key_error"].get<double>() < 1e-3);  // fp16 of F16 keys: exact up to rounding
  // Without a name a file of two tensors is ambiguous: the error lists them.
  auto ambiguous = memtwin::test::run_memtwin({"kernels", "--keys", path, "--values", path + ":V"});
  CHECK(ambiguous.exit_code == 2);
  CHECK_THAT(ambiguous.err, Catch::Contains("2 tensors") && Catch::Contains("K, V"));
  auto missing = memtwin::test::run_memtwin({"kernels", "--keys", path + ":Q", "--values", path + ":V"});
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::Contains("no tensor 'Q'"));
}

TEST_CASE("KIVI caches hold exactly the bytes memtwin's size model counts, token by token", "[unit]") {
  for (int bits : {2, 4}) {
    const int head_dim = 128, group = 32, residual = 128;
    KiviSequence cache(head_dim, bits, group, residual);
    const memtwin::KvShape one_head{1, 1, head_dim, 2};
    memtwin::GroupQuantKv model(one_head, bits, group, true, residual);
    const auto k = synthetic_kv(700, head_dim, 11, true);
    const auto v = synthetic_kv(700, head_dim, 12, false);
    for (int t = 0; t < 700; ++t) {
      cache.append(&k[static_cast<std::size_t>(t) * head_dim], &v[static_cast<std::size_t>(t) * head_dim]);
      REQUIRE(cache.quantized_tokens() == model.quantized_tokens(t + 1));
      REQUIRE(static_cast<double>(cache.bytes()) == model.sequence_bytes(t + 1, 0));
    }
    // Per-channel keys keep the outlier channels (every 37th here) from stretching everyone else's
    // quantisation step: on the ordinary channels KIVI's error is far below per-token groups'.
    std::vector<float> kd, vd;
    cache.read(kd, vd);
    KvFormat per_token = format(bits == 4 ? KvElement::int4 : KvElement::int2);
    std::vector<std::uint8_t> bytes(per_token.vector_bytes());
    std::vector<float> back(head_dim);
    double kivi = 0, token_groups = 0, den = 0;
    for (int t = 0; t < 700; ++t) {
      quantize_vector(&k[static_cast<std::size_t>(t) * head_dim], per_token, bytes.data());
      dequantize_vector(bytes.data(), per_token, back.data());
      for (int i = 0; i < head_dim; ++i) {
        if (i % 37 == 0) continue;  // an outlier channel
        const double x = k[t * head_dim + i];
        kivi += (kd[t * head_dim + i] - x) * (kd[t * head_dim + i] - x);
        token_groups += (back[i] - x) * (back[i] - x);
        den += x * x;
      }
    }
    INFO("bits " << bits << ": ordinary-channel key error, KIVI " << std::sqrt(kivi / den) << ", per-token groups "
                 << std::sqrt(token_groups / den));
    CHECK(std::sqrt(kivi / den) < 0.5 * std::sqrt(token_groups / den));
  }
}

TEST_CASE("eviction support: H2O scores, SnapKV votes, entropy, selection and compaction", "[unit]") {
  // H2O: a GQA group's probabilities add up in its KV head's scores.
  std::vector<float> probs = {0.5f, 0.5f, 0.f, 0.2f, 0.3f, 0.5f, 1.f, 0.f, 0.f, 0.f, 0.f, 1.f};  // 4 heads x 3 tokens
  std::vector<float> scores(2 * 3, 0.f);
  accumulate_attention(probs.data(), 4, 2, 3, scores.data());
  CHECK(scores == std::vector<float>{0.7f, 0.8f, 0.5f, 1.f, 0.f, 1.f});
  // SnapKV: window votes summed, then max-pooled over three neighbours.
  std::vector<float> attention = {0, 1, 0, 0, 0, 0,   0, 0, 0, 0, 2, 0};  // 1 head x 2 window rows x 6 tokens
  std::vector<float> pooled(6);
  snapkv_scores(attention.data(), 1, 2, 6, 3, pooled.data());
  CHECK(pooled == std::vector<float>{1, 1, 1, 2, 2, 2});
  // Entropy: uniform over n is log n, one-hot is 0.
  std::vector<float> rows = {0.25f, 0.25f, 0.25f, 0.25f, 0.f, 1.f, 0.f, 0.f};
  std::vector<float> entropy(2);
  attention_entropy(rows.data(), 2, 4, entropy.data());
  CHECK(entropy[0] == Approx(std::log(4.0)));
  CHECK(entropy[1] == Approx(0.0).margin(1e-12));
  // Selection: sinks and recent always, then the best of the middle, exactly `keep` in all.
  std::vector<float> s = {0, 9, 1, 8, 2, 7, 3, 0, 0, 5};
  CHECK(select_tokens(s.data(), 10, 6, 1, 2) == std::vector<int>{0, 1, 3, 5, 8, 9});
  CHECK(select_tokens(s.data(), 4, 6, 1, 2) == std::vector<int>{0, 1, 2, 3});

  // Compaction keeps exactly the selected tokens' vectors, in order, for the one head.
  PagedShape shape{8, 4, 2, format(KvElement::int4, 64, 32)};
  const int tokens = 20;
  const std::vector<std::int32_t> table = {5, 2, 7, 0, 3};
  const auto x = synthetic_kv(static_cast<std::size_t>(tokens) * 2, 64, 21, false);
  std::vector<std::int64_t> slots(tokens);
  for (int t = 0; t < tokens; ++t) slots[t] = table[t / 4] * 4 + t % 4;
  std::vector<std::uint8_t> cache(shape.bytes());
  write_paged(x.data(), slots.data(), tokens, shape, cache.data());
  const std::vector<std::uint8_t> before = cache;
  const std::vector<int> kept = {0, 3, 4, 9, 15, 19};
  compact_head(cache.data(), shape, table.data(), 1, kept);
  const std::size_t vb = shape.format.vector_bytes();
  for (std::size_t i = 0; i < kept.size(); ++i) {
    const std::uint8_t* now = cache.data() + shape.offset(table[i / 4], i % 4, 1);
    const std::uint8_t* was = before.data() + shape.offset(table[kept[i] / 4], kept[i] % 4, 1);
    CHECK(std::equal(now, now + vb, was));
  }
  for (int t = 0; t < tokens; ++t) {  // head 0 is untouched
    const std::size_t off = shape.offset(table[t / 4], t % 4, 0);
    CHECK(std::equal(cache.begin() + off, cache.begin() + off + vb, before.begin() + off));
  }
}

TEST_CASE("memtwin kernels refuses a top-k below 1 (it read before its buffer) with exit 2", "[unit]") {
  for (const char* k : {"-5", "0"}) {
    auto r = memtwin::test::run_memtwin({"kernels", "--tokens", "64", "--topk", k});
    INFO(k << ": " << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("--topk must be at least 1"));
  }
}
