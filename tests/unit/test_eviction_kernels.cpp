// The CPU kernels score-based eviction runs on the serving engine's paged cache (H2O and SnapKV on
// the host device): decode attention's probabilities, scores kept beside the cache, selection
// with compaction, and H2O's per-step eviction, against plain references.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "hw/host/host_serving_kernels.h"
#include "kernels/eviction.h"
#include "kernels/kv_kernels.h"
#include "tests/unit/kv_test_data.h"

using namespace memtwin::kernels;
using memtwin::test::format;
using memtwin::test::rounded_query;
using memtwin::test::synthetic_kv;

namespace {

// A cache whose every vector holds its token's position (exact in fp16 below 2048), so that a
// test can read which token each (slot, head) holds.
struct PositionCache {
  PagedShape shape;
  std::vector<std::int32_t> table;
  std::vector<std::uint8_t> k, v;
  std::vector<float> scores;
  PositionCache(int kv_heads, int blocks) : shape{blocks, 4, kv_heads, format(KvElement::fp16, 64)} {
    for (int b = 0; b < blocks; ++b) table.push_back((b * 7 + 3) % blocks);  // scattered (7 is prime to the block counts used)
    k.resize(shape.bytes());
    v.resize(shape.bytes());
    scores.assign(static_cast<std::size_t>(blocks) * shape.block_size * kv_heads, 0.f);
  }
  [[nodiscard]] PagedScores paged_scores() { return {scores.data(), shape.block_size, shape.kv_heads}; }
  [[nodiscard]] std::int64_t slot(int logical) const { return table[logical / shape.block_size] * shape.block_size + logical % shape.block_size; }
  void write(int logical, int position) {
    std::vector<float> x(static_cast<std::size_t>(shape.kv_heads) * 64, static_cast<float>(position));
    const std::int64_t s = slot(logical);
    write_paged(x.data(), &s, 1, shape, k.data());
    write_paged(x.data(), &s, 1, shape, v.data());
  }
  [[nodiscard]] int token(int logical, int head) const {
    float x[64];
    dequantize_vector(k.data() + shape.offset(table[logical / 4], logical % 4, head), shape.format, x);
    return static_cast<int>(x[0]);
  }
  float& score(int logical, int head) { return *paged_scores().at(table.data(), logical, head); }
};

}  // namespace

TEST_CASE("decode attention returns each head's probabilities, with or without its output", "[unit]") {
  const int seqs = 2, kv_heads = 2, q_heads = 4, head_dim = 128, block_size = 16, max_blocks = 12;
  const std::vector<std::int32_t> context = {37, 190};
  const int max_context = max_blocks * block_size;
  const auto k = synthetic_kv(static_cast<std::size_t>(seqs) * max_context * kv_heads, head_dim, 7, true);
  const auto v = synthetic_kv(k.size() / head_dim, head_dim, 8, false);
  const auto q = synthetic_kv(static_cast<std::size_t>(seqs) * q_heads, head_dim, 9, false);
  // The query as the integer key scores round it (SimdLevel::avx512_vnni, int8 keys).
  const std::vector<float> q_rounded = rounded_query(q, 32);
  std::vector<std::int32_t> table(seqs * max_blocks);
  for (int i = 0; i < seqs * max_blocks; ++i) table[i] = (i * 5) % (seqs * max_blocks);
  for (KvElement element : {KvElement::fp16, KvElement::int8}) {
    PagedShape shape{seqs * max_blocks, block_size, kv_heads, format(element, head_dim)};
    std::vector<std::uint8_t> kc(shape.bytes()), vc(shape.bytes());
    for (int s = 0; s < seqs; ++s) {
      std::vector<std::int64_t> slots(max_context);
      for (int t = 0; t < max_context; ++t) slots[t] = table[s * max_blocks + t / block_size] * block_size + t % block_size;
      write_paged(&k[static_cast<std::size_t>(s) * max_context * kv_heads * head_dim], slots.data(), max_context, shape, kc.data());
      write_paged(&v[static_cast<std::size_t>(s) * max_context * kv_heads * head_dim], slots.data(), max_context, shape, vc.data());
    }
    // The reference: softmax of the scaled dot products with the keys as the cache holds them.
    const float scale = 1.f / std::sqrt(static_cast<float>(head_dim));
    auto expected_for = [&](const std::vector<float>& query) {
      std::vector<double> expected(static_cast<std::size_t>(seqs) * q_heads * max_context, 0.0);
      for (int s = 0; s < seqs; ++s)
        for (int h = 0; h < q_heads; ++h) {
          std::vector<double> logits(context[s]);
          for (int t = 0; t < context[s]; ++t) {
            float key[128];
            dequantize_vector(kc.data() + shape.offset(table[s * max_blocks + t / block_size], t % block_size, h / 2), shape.format, key);
            double dot = 0;
            for (int i = 0; i < head_dim; ++i) dot += static_cast<double>(query[(s * q_heads + h) * head_dim + i]) * key[i];
            logits[t] = dot * scale;
          }
          const double m = *std::max_element(logits.begin(), logits.end());
          double sum = 0;
          for (double& x : logits) sum += (x = std::exp(x - m));
          for (int t = 0; t < context[s]; ++t) expected[(static_cast<std::size_t>(s) * q_heads + h) * max_context + t] = logits[t] / sum;
        }
      return expected;
    };
    const std::vector<double> exact = expected_for(q), rounded = expected_for(q_rounded);
    for (SimdLevel level : kSimdLevels) {
      if (level > cpu_simd_level()) {
        WARN("this CPU has no " << simd_level_name(level) << ": its kernel's probabilities were not checked");
        continue;
      }
      for (bool with_output : {true, false}) {
        INFO(simd_level_name(level) << ", bits " << shape.format.bits() << (with_output ? ", with output" : ", probabilities only"));
        std::vector<float> out(static_cast<std::size_t>(seqs) * q_heads * head_dim, -1.f);
        std::vector<float> probs(exact.size(), -1.f);
        auto a = make_decode_args(q.data(), kc.data(), vc.data(), table.data(), context.data(), with_output ? out.data() : nullptr,
                                  seqs, q_heads, max_blocks, shape);
        a.probs = probs.data();
        a.probs_stride = max_context;
        const std::vector<double>& expected = scores_against_rounded_query(a, level) ? rounded : exact;
        decode_attention(a, level);
        double worst = 0;
        for (int s = 0; s < seqs; ++s)
          for (int h = 0; h < q_heads; ++h)
            for (int t = 0; t < context[s]; ++t) {
              const std::size_t i = (static_cast<std::size_t>(s) * q_heads + h) * max_context + t;
              worst = std::max(worst, std::fabs(probs[i] - expected[i]));
            }
        CHECK(worst < 1e-5);
        CHECK(probs[static_cast<std::size_t>(context[0])] == -1.f);  // nothing past a sequence's context
        if (!with_output) CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x == -1.f; }));
      }
    }
  }
  PagedShape shape{seqs * max_blocks, block_size, kv_heads, format(KvElement::fp16, head_dim)};
  std::vector<std::uint8_t> kc(shape.bytes()), vc(shape.bytes());
  auto bad = make_decode_args(q.data(), kc.data(), vc.data(), table.data(), context.data(), nullptr, seqs, q_heads, max_blocks, shape);
  CHECK_THROWS_WITH(decode_attention(bad), Catch::Contains("null"));  // neither output nor probabilities
  std::vector<float> small(10);
  bad.probs = small.data();
  bad.probs_stride = 10;
  CHECK_THROWS_WITH(decode_attention(bad), Catch::Contains("probs_stride"));
}

TEST_CASE("paged scores: rows add their GQA group's probabilities, and selection compacts K, V and scores", "[unit]") {
  PositionCache c(2, 8);
  const int tokens = 20;
  for (int t = 0; t < tokens; ++t) c.write(t, t);
  // Two query rows of the one sequence (a prefill chunk), causal contexts 19 and 20, 4 query heads.
  const int q_heads = 4, stride = 32;
  std::vector<float> probs(2 * q_heads * stride, 0.f);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  for (float& p : probs) p = u(rng);
  const std::vector<std::int32_t> context = {19, 20};
  std::vector<std::int32_t> tables(c.table);
  tables.insert(tables.end(), c.table.begin(), c.table.end());
  accumulate_paged_scores(probs.data(), 2, q_heads, stride, tables.data(), 8, context.data(), c.paged_scores());
  for (int head = 0; head < 2; ++head)
    for (int t = 0; t < tokens; ++t) {
      float want = 0;
      for (int r = 0; r < 2; ++r)
        for (int g = 0; g < 2; ++g)
          if (t < context[r]) want += probs[(r * q_heads + head * 2 + g) * stride + t];
      CHECK(c.score(t, head) == Approx(want));
    }
  // H2O's selection: per head, the top scores and the recent window, scores moved with the tokens.
  std::vector<std::vector<float>> before(2);
  for (int head = 0; head < 2; ++head)
    for (int t = 0; t < tokens; ++t) before[head].push_back(c.score(t, head));
  PromptSelection sel;
  sel.block_table = sel.score_table = c.table.data();
  sel.tokens = tokens;
  sel.keep = 7;
  sel.recent = 3;
  sel.move_scores = true;
  select_and_compact(c.k.data(), c.v.data(), c.shape, c.paged_scores(), sel);
  for (int head = 0; head < 2; ++head) {
    const auto kept = select_tokens(before[head].data(), tokens, 7, 0, 3);
    for (int i = 0; i < 7; ++i) {
      CHECK(c.token(i, head) == kept[i]);
      CHECK(c.score(i, head) == before[head][kept[i]]);
    }
  }
  // SnapKV's: votes max-pooled over 3 neighbours first (a lone peak drags its neighbours in).
  PositionCache d(1, 8);
  for (int t = 0; t < tokens; ++t) d.write(t, t), d.score(t, 0) = t == 6 ? 10.f : 0.f;
  sel.block_table = sel.score_table = d.table.data();
  sel.keep = 5;
  sel.recent = 2;
  sel.pooling = 3;
  sel.move_scores = false;
  select_and_compact(d.k.data(), d.v.data(), d.shape, d.paged_scores(), sel);
  const std::vector<int> held = {d.token(0, 0), d.token(1, 0), d.token(2, 0), d.token(3, 0), d.token(4, 0)};
  CHECK(held == std::vector<int>{5, 6, 7, 18, 19});
  sel.pooling = 2;
  CHECK_THROWS_WITH(select_and_compact(d.k.data(), d.v.data(), d.shape, d.paged_scores(), sel), Catch::Contains("odd"));
}

TEST_CASE("H2O in a paged cache: heavy hitters plus a ring of recent tokens hold what H2O keeps, step by step", "[unit]") {
  // A 30-token prompt keeps 9 per head (6 heavy hitters, a window of 3); 40 decode steps follow.
  // Each step's attention is a function of (token, head, step), so the reference can follow
  // tokens by name while the kernels move them between slots.
  const int kv_heads = 3, prompt = 30, heavy = 6, recent = 3, budget = heavy + recent;
  auto attention = [](int token, int head, int step) {
    return static_cast<float>(std::fmod(std::sin(token * 12.9898 + head * 78.233 + step * 37.719) * 43758.5453, 1.0) + 1.0);
  };
  PositionCache c(kv_heads, 10);
  for (int t = 0; t < prompt; ++t) {
    c.write(t, t);
    for (int h = 0; h < kv_heads; ++h) c.score(t, h) = attention(t, h, -1);
  }
  // The reference: per head, each held token's accumulated score.
  std::vector<std::map<int, float>> held(kv_heads);
  for (int h = 0; h < kv_heads; ++h) {
    std::vector<float> s;
    for (int t = 0; t < prompt; ++t) s.push_back(attention(t, h, -1));
    for (int t : select_tokens(s.data(), prompt, budget, 0, recent)) held[h][t] = s[t];
  }
  PromptSelection sel;
  sel.block_table = sel.score_table = c.table.data();
  sel.tokens = prompt;
  sel.keep = budget;
  sel.recent = recent;
  sel.move_scores = true;
  select_and_compact(c.k.data(), c.v.data(), c.shape, c.paged_scores(), sel);

  for (int step = 0; step < 40; ++step) {
    const int position = prompt + step, ring = heavy + step % recent;
    // Kernels: the leaving token competes with the heavy hitters, the new token takes its slot
    // with a zero score, then this step's attention is added to every held token.
    promote_leaving_token(c.k.data(), c.v.data(), c.shape, c.paged_scores(), c.table.data(), heavy, ring);
    c.write(ring, position);
    for (int h = 0; h < kv_heads; ++h) c.score(ring, h) = 0.f;
    std::vector<float> probs(static_cast<std::size_t>(kv_heads) * budget);
    for (int h = 0; h < kv_heads; ++h)
      for (int slot = 0; slot < budget; ++slot) probs[h * budget + slot] = attention(c.token(slot, h), h, step);
    const std::int32_t context = budget;
    accumulate_paged_scores(probs.data(), 1, kv_heads, budget, c.table.data(), 10, &context, c.paged_scores());
    // Reference H2O: the lowest-scored of the heavy hitters and the token leaving the window goes.
    for (int h = 0; h < kv_heads; ++h) {
      auto& m = held[h];
      const int leaving = position - recent;
      int lowest = -1;
      for (const auto& [token, score] : m)
        if (token < leaving && (lowest < 0 || score < m[lowest])) lowest = token;
      if (m[leaving] > m[lowest]) m.erase(lowest); else m.erase(leaving);
      m[position] = 0.f;
      for (auto& [token, score] : m) score += attention(token, h, step);
    }
    for (int h = 0; h < kv_heads; ++h) {
      std::set<int> in_cache, in_reference;
      for (int slot = 0; slot < budget; ++slot) in_cache.insert(c.token(slot, h));
      for (const auto& [token, score] : held[h]) in_reference.insert(token);
      INFO("step " << step << " head " << h);
      REQUIRE(in_cache == in_reference);
      for (int slot = 0; slot < budget; ++slot) CHECK(c.score(slot, h) == Approx(held[h][c.token(slot, h)]));
    }
  }
}

TEST_CASE("H2O's prompt scores on the host: a QK^T product per head gives what decode attention's probabilities give", "[unit]") {
  // A sequence of 70 cached tokens, of which the last 30 are this chunk's queries (causal).
  const int kv_heads = 2, q_heads = 4, head_dim = 64, tokens = 70, first = 40, rows = tokens - first;
  PositionCache c(kv_heads, 20);  // 80 slots
  const auto keys = synthetic_kv(static_cast<std::size_t>(tokens) * kv_heads, head_dim, 31, true);
  std::vector<std::int64_t> slots(tokens);
  for (int t = 0; t < tokens; ++t) slots[t] = c.slot(t);
  c.shape.format = format(KvElement::fp16, head_dim);
  write_paged(keys.data(), slots.data(), tokens, c.shape, c.k.data());
  const int row_stride = q_heads * head_dim + 16;  // the engine's queries sit in wider rows
  auto queries = synthetic_kv(static_cast<std::size_t>(rows) * row_stride / head_dim + 1, head_dim, 32, false);
  memtwin::hw::HostServingKernels host;
  host.score_prompt(queries.data(), row_stride, rows, first, q_heads, c.shape, c.k.data(), c.table.data(), c.paged_scores(),
                    c.table.data());
  // The reference: decode attention's probabilities of each query row, accumulated.
  std::vector<float> packed(static_cast<std::size_t>(rows) * q_heads * head_dim), probs(static_cast<std::size_t>(rows) * q_heads * 80);
  for (int r = 0; r < rows; ++r)
    std::copy_n(queries.begin() + static_cast<long>(r) * row_stride, q_heads * head_dim, packed.begin() + static_cast<long>(r) * q_heads * head_dim);
  std::vector<std::int32_t> tables, context;
  for (int r = 0; r < rows; ++r) tables.insert(tables.end(), c.table.begin(), c.table.end()), context.push_back(first + r + 1);
  auto a = make_decode_args(packed.data(), c.k.data(), c.v.data(), tables.data(), context.data(), nullptr, rows, q_heads, 20, c.shape);
  a.probs = probs.data();
  a.probs_stride = 80;
  decode_attention(a, false);
  std::vector<float> expected(static_cast<std::size_t>(80) * kv_heads, 0.f);
  accumulate_paged_scores(probs.data(), rows, q_heads, a.probs_stride, tables.data(), 20, context.data(),
                          PagedScores{expected.data(), 4, kv_heads});
  for (int h = 0; h < kv_heads; ++h)
    for (int t = 0; t < tokens; ++t) {
      INFO("token " << t << " head " << h);
      CHECK(c.score(t, h) == Approx(*PagedScores{expected.data(), 4, kv_heads}.at(c.table.data(), t, h)).epsilon(1e-4));
    }
}
