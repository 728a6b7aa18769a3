#include <catch2/catch.hpp>

#include <cmath>

#include <numeric>

#include "models/kv/kv_methods.h"
#include "models/memory/serving_memory.h"
#include "models/model_facts.h"
#include "models/scenario_loader.h"
#include "tests/test_support.h"

using namespace memtwin;

namespace {
Scenario load(const std::string& relative, const std::vector<std::string>& overrides = {}) {
  return load_scenario_file(test::source_path(relative), overrides).scenario;
}
const std::string kFp16 = "scenarios/serving/llama3-8b-h100-fp16-kv.yaml";
}  // namespace

TEST_CASE("vLLM capacity: utilization x memory minus weights, activations and runtime", "[unit]") {
  Scenario s = load(kFp16);
  ServingMemory m = serving_memory(s);
  CHECK(m.kv_pool == m.budget - m.weights - m.activations - m.runtime - m.cuda_graphs);
  CHECK(m.budget.as_double() == Approx(0.9 * s.cluster.gpu.memory.as_double()).margin(1));
  // Llama-3-8B bf16 weights: 8.03e9 x 2 bytes.
  CHECK(m.weights.as_double() == Approx(8'030'261'248.0 * 2).epsilon(1e-6));
  CHECK(m.kv_bytes_per_token_uncompressed == 131072);
  CHECK(m.capacity_blocks == m.kv_pool.count() / m.block_bytes.count());
  CHECK(m.fits);
}

TEST_CASE("an explicit KV pool replaces the engine's rule", "[unit]") {
  ServingMemory m = serving_memory(load(kFp16, {"inference.kv_cache.memory=12GiB"}));
  CHECK(m.kv_pool.count() == 12LL << 30);
  CHECK(m.capacity_blocks == (12LL << 30) / (131072 * 16));
}

TEST_CASE("KV bytes split over tensor and pipeline ranks", "[unit]") {
  Scenario s = load(kFp16, {"cluster.gpus_per_node=8", "inference.serving.tensor_parallel=4",
                            "inference.serving.pipeline_parallel=2"});
  ServingMemory m = serving_memory(s);
  CHECK(m.kv_bytes_per_token_uncompressed == 2.0 * 16 * 2 * 128 * 2);  // 16 layers, 2 of 8 KV heads
}

TEST_CASE("KIVI: b + 32/G bits per element, with a full-precision residual", "[unit]") {
  KvShape shape{32, 8, 128, 2};
  for (int bits : {2, 4}) {
    GroupQuantKv kivi(shape, bits, 32, true, 128);
    const double bits_per_element = kivi.bytes_per_stored_token() * 8 / (2.0 * 32 * 8 * 128);
    CHECK(bits_per_element == Approx(bits + 32.0 / 32));
    // 1,000 tokens: 864 quantised in whole groups of 32 after the 128-token residual, 136 full.
    CHECK(kivi.quantized_tokens(1000) == 864);
    CHECK(kivi.sequence_bytes(1000, 0) ==
          Approx(864 * kivi.bytes_per_stored_token() + 136 * shape.token_bytes()));
  }
}

TEST_CASE("AWQ int4 weights take 4.156 bits on the linear layers", "[validation]") {
  CHECK(linear_weight_bytes(WeightDtype::awq_int4, 128, 4096) * 8 == Approx(4.156).epsilon(0.001));
}

TEST_CASE("PyramidKV budgets fall with depth and keep the mean", "[unit]") {
  auto budgets = pyramid_budgets(32, 2048, 32, 20);
  const double mean = std::accumulate(budgets.begin(), budgets.end(), 0.0) / budgets.size();
  CHECK(mean == Approx(2048));
  CHECK(budgets.front() > budgets.back());
  CHECK(budgets.back() == Approx(32 + (2048 - 32) / 20.0));
}

TEST_CASE("a paged engine rounds each PyramidKV layer to whole blocks, and the blocks counted hold them", "[unit]") {
  // 4 layers, 16-token blocks: the layers keep different numbers of tokens, each rounded up.
  KvShape shape{4, 8, 128, 2};
  shape.block_size = 16;
  const auto budgets = pyramid_budgets(4, 64, 16, 20);
  PromptBudgetKv paged("pyramidkv", shape, budgets);
  shape.block_size = 0;
  PromptBudgetKv unpaged("pyramidkv", shape, budgets);
  const double per_layer_token = shape.token_bytes() / 4, block_bytes = 16 * shape.token_bytes();
  for (std::int64_t prompt : {10, 40, 100, 160, 1000}) {
    for (std::int64_t generated : {0, 1, 7, 33}) {
      INFO("prompt " << prompt << ", generated " << generated);
      std::int64_t layer_blocks = 0;
      double expected = 0;
      for (int l = 0; l < 4; ++l) {
        const std::int64_t kept = paged.kept_tokens_in_layer(prompt, generated, l);
        CHECK(kept == std::min<std::int64_t>(prompt, std::llround(budgets[l])) + generated);
        layer_blocks += (kept + 15) / 16;
        expected += static_cast<double>((kept + 15) / 16 * 16) * per_layer_token;
      }
      CHECK(paged.sequence_bytes(prompt, generated) == Approx(expected));
      CHECK(paged.sequence_bytes(prompt, generated) >= unpaged.sequence_bytes(prompt, generated) - 4 * per_layer_token);
      // What LayerBlockPool relies on: the scheduler's blocks, as layer blocks, hold every layer.
      const auto blocks = static_cast<std::int64_t>(std::ceil(paged.sequence_bytes(prompt, generated) / block_bytes));
      CHECK(layer_blocks <= blocks * 4);
    }
  }
}

TEST_CASE("compression never lowers capacity and eviction caps long sequences", "[unit]") {
  ServingMemory none = serving_memory(load(kFp16));
  for (const char* method : {"kivi", "int8", "int4", "int2", "streaming", "h2o", "snapkv", "pyramidkv", "entropy"}) {
    INFO(method);
    ServingMemory m = serving_memory(load(kFp16, {std::string("inference.kv_cache.compression.method=") + method}));
    CHECK(m.capacity_tokens >= none.capacity_tokens);
    CHECK(m.typical_sequences >= none.typical_sequences);
    CHECK(m.kv_bytes_per_token <= none.kv_bytes_per_token);
  }
  KvShape shape{32, 8, 128, 2};
  StreamingKv streaming(shape, 4, 1020);
  CHECK(streaming.sequence_bytes(100000, 5000) == streaming.sequence_bytes(1024, 0));
}

TEST_CASE("the example scenarios: KIVI and H2O hold more requests than a 16-bit cache", "[unit]") {
  ServingMemory fp16 = serving_memory(load(kFp16));
  ServingMemory kivi = serving_memory(load("scenarios/serving/llama3-8b-h100-kivi4-kv.yaml"));
  ServingMemory h2o = serving_memory(load("scenarios/serving/llama3-8b-h100-h2o20-kv.yaml"));
  CHECK(kivi.typical_sequences > 2 * fp16.typical_sequences);
  CHECK(h2o.typical_sequences > 3 * fp16.typical_sequences);
  CHECK(kivi.kv_pool == fp16.kv_pool);  // the same pool, filled more densely
}

TEST_CASE("a model too big for the GPU is reported, with hints", "[unit]") {
  Scenario s = load(kFp16, {"model=llama-2-70b", "inference.serving.max_model_len=4096"});
  ServingMemory m = serving_memory(s);
  CHECK_FALSE(m.fits);
  CHECK_THAT(m.why_not, Catch::Contains("leave no room for a KV cache"));
  CHECK_FALSE(serving_fit_hints(s, m).empty());
}
