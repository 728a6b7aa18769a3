// The engines' balanced MoE routing (models/serving/expert_routing.h) is what the iteration model
// prices: each token gets top-k distinct experts, min(experts, tokens x top-k) experts get rows,
// as evenly as can be.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <vector>

#include "models/scenario_loader.h"
#include "models/serving/expert_routing.h"
#include "models/serving/iteration_cost.h"
#include "tests/test_support.h"

using namespace memtwin;

namespace {

// experts_of[t]: the experts token t is routed to, from every expert's runs.
std::vector<std::vector<int>> route(int rows, int experts, int top_k) {
  std::vector<std::vector<int>> experts_of(static_cast<std::size_t>(rows));
  for (int e = 0; e < experts; ++e) {
    for (const ExpertRun& run : expert_runs(rows, experts, top_k, e)) {
      REQUIRE(run.count > 0);
      REQUIRE(run.first + (run.count - 1) * run.stride < rows);
      for (int i = 0; i < run.count; ++i) experts_of[static_cast<std::size_t>(run.first + i * run.stride)].push_back(e);
    }
  }
  return experts_of;
}

}  // namespace

TEST_CASE("balanced MoE routing gives each token top-k distinct experts and min(E, n x k) experts rows", "[unit]") {
  for (const auto& [experts, top_k] : std::vector<std::pair<int, int>>{{8, 2}, {8, 3}, {6, 4}, {128, 8}, {4, 4}, {8, 1}}) {
    for (int rows : {0, 1, 2, 3, 4, 5, 8, 17, 64, 301}) {
      INFO(experts << " experts, top-" << top_k << ", " << rows << " rows");
      const auto experts_of = route(rows, experts, top_k);
      std::vector<int> load(static_cast<std::size_t>(experts), 0);
      for (const auto& chosen : experts_of) {
        CHECK(chosen.size() == static_cast<std::size_t>(top_k));
        CHECK(std::set<int>(chosen.begin(), chosen.end()).size() == chosen.size());
        for (int e : chosen) ++load[static_cast<std::size_t>(e)];
      }
      const int touched = static_cast<int>(std::count_if(load.begin(), load.end(), [](int n) { return n > 0; }));
      CHECK(touched == std::min(experts, rows * top_k));
      const auto [least, most] = std::minmax_element(load.begin(), load.end());
      CHECK(*most - *least <= 1);
    }
  }
}

TEST_CASE("the iteration model reads the share of experts the engines' routing touches", "[unit]") {
  const Scenario s = load_scenario_file(test::source_path("scenarios/host/serve-moe-kv.yaml"), {}).scenario;
  const IterationModel model(s);
  for (int tokens : {1, 2, 3, 4, 7, 8, 40}) {
    const auto experts_of = route(tokens, s.model.experts, s.model.experts_per_token);
    std::set<int> touched;
    for (const auto& chosen : experts_of) touched.insert(chosen.begin(), chosen.end());
    CHECK(model.experts_touched(tokens) == Approx(static_cast<double>(touched.size()) / s.model.experts));
  }
}

TEST_CASE("balanced MoE routing refuses an expert or top-k out of range", "[unit]") {
  CHECK_THROWS_AS(expert_runs(4, 8, 9, 0), std::invalid_argument);
  CHECK_THROWS_AS(expert_runs(4, 8, 2, 8), std::invalid_argument);
  CHECK_THROWS_AS(expert_runs(-1, 8, 2, 0), std::invalid_argument);
}
