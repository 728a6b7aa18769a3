// The serving iteration's weight GEMMs (models/serving/serving_gemms.h), which the simulator prices
// and the hardware engine runs: together they are the model's matmul weights, split over tensor
// ranks as Megatron-LM splits them.
#include <catch2/catch.hpp>

#include "models/model_facts.h"
#include "models/scenario_loader.h"
#include "models/serving/serving_gemms.h"
#include "tests/unit/serving_helpers.h"

using namespace memtwin;

namespace {

double weights_of(const ModelSpec& m, int tp) {
  double total = 0;
  for (const ServingGemm& g : serving_weight_gemms(m, tp, 1)) {
    const double layers = g.role == ServingGemm::Role::head ? 1.0 : m.layers;
    total += g.elements() * g.per_layer * g.rows_per_token * layers;
  }
  return total;
}

}  // namespace

TEST_CASE("a serving iteration's weight GEMMs are the model's matmul parameters, fused as vLLM fuses them", "[unit]") {
  const Scenario s = load_scenario_file(test::source_path(test::kFp16), {}).scenario;  // Llama-3-8B
  const ModelSpec& m = s.model;
  const auto gemms = serving_weight_gemms(m, 1, 1);
  REQUIRE(gemms.size() == 5);
  CHECK(gemms[0].name == "qkv_proj");
  CHECK(gemms[0].outputs == m.heads * m.head_dim + 2 * m.kv_heads * m.head_dim);
  CHECK(gemms[2].name == "gate_up_proj");
  CHECK(gemms[2].outputs == 2 * m.intermediate);
  CHECK(gemms[4].role == ServingGemm::Role::head);
  CHECK(weights_of(m, 1) == Approx(matmul_parameters_per_token(m)).epsilon(1e-12));
  // Tensor parallelism over 4 ranks: each holds a quarter (8 KV heads split 2 a rank).
  CHECK(4 * weights_of(m, 4) == Approx(matmul_parameters_per_token(m)).epsilon(1e-12));
  // More ranks than KV heads: each rank keeps one whole KV head (replicated), so the ranks together
  // hold more than the model's K and V projections.
  CHECK(16 * weights_of(m, 16) > matmul_parameters_per_token(m));
}

TEST_CASE("a mixture of experts' expert GEMMs each see top-k over experts of the batch's rows", "[unit]") {
  const Scenario s = load_scenario_file(test::source_path(test::kFp16),
                                        {"model={layers: 4, hidden: 512, heads: 8, kv_heads: 8, intermediate: 1408, "
                                         "vocab: 8192, mlp: swiglu, experts: 8, experts_per_token: 2}"})
                         .scenario;
  const auto gemms = serving_weight_gemms(s.model, 1, 1);
  REQUIRE(gemms.size() == 6);
  CHECK(gemms[2].role == ServingGemm::Role::router);  // the router's logits before the experts
  CHECK(gemms[2].outputs == 8);
  CHECK(gemms[3].per_layer == 8);
  CHECK(gemms[3].rows_per_token == Approx(0.25));
  CHECK(gemms[3].routed());
  CHECK(!gemms[2].routed());
  CHECK(gemms[0].per_layer == 1);
  // Per token the active parameters, router included: what matmul_parameters_per_token counts.
  CHECK(weights_of(s.model, 1) == Approx(matmul_parameters_per_token(s.model)).epsilon(1e-12));
}
