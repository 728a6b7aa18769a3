// The serving report's percentiles: nearest rank over every sample, whether the samples are a
// vector (TTFT, TPOT) or runs of equal values (inter-token gaps, models/serving/value_runs.h).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "models/scenario_loader.h"
#include "models/serving/serving_report.h"
#include "tests/unit/serving_helpers.h"

using namespace memtwin;

namespace {

double nearest_rank(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

}  // namespace

TEST_CASE("equal values kept as runs: each run once, every sample counted", "[unit]") {
  ValueRuns runs;
  for (float v : {0.5f, 0.5f, 0.5f, 0.25f, 0.5f, 0.5f}) runs.add(v);
  CHECK(runs.size() == 6);
  REQUIRE(runs.runs().size() == 3);
  CHECK(runs.runs()[0] == std::pair<float, std::uint32_t>{0.5f, 3});
  CHECK(runs.runs()[1] == std::pair<float, std::uint32_t>{0.25f, 1});
  CHECK(runs.runs()[2] == std::pair<float, std::uint32_t>{0.5f, 2});
}

TEST_CASE("a serving report's percentiles are nearest-rank, from a vector of samples or from runs of them", "[unit]") {
  const Scenario s = load_scenario_file(test::source_path(test::kFp16), {}).scenario;
  ServingRun run;
  std::mt19937 random(3);
  std::uniform_int_distribution<int> gap(1, 40), repeat(1, 30), tokens(2, 50);
  std::vector<double> gaps, tpots;
  for (int request = 0; request < 300; ++request) {
    RequestRecord r;
    r.id = request;
    r.arrival_s = request * 0.1;
    r.first_token_s = r.arrival_s + 0.01 * gap(random);
    r.output_tokens = tokens(random);
    r.finish_s = r.first_token_s + 0.001 * gap(random) * (r.output_tokens - 1);
    tpots.push_back((r.finish_s - r.first_token_s) / (r.output_tokens - 1));
    run.requests.push_back(r);
  }
  for (int i = 0; i < 2000; ++i) {
    const float g = 0.001f * static_cast<float>(gap(random));
    for (int n = repeat(random); n > 0; --n) {
      run.inter_token_s.add(g);
      gaps.push_back(g);
    }
  }
  run.makespan_s = 40;
  nlohmann::ordered_json metrics;
  std::vector<std::string> notes;
  add_serving_results(metrics, notes, s, run);
  for (const auto& [name, p] : {std::pair{"p50", 50.0}, {"p90", 90.0}, {"p99", 99.0}}) {
    INFO(name);
    CHECK(metrics["latency_s"]["itl"][name].get<double>() == nearest_rank(gaps, p));
    CHECK(metrics["latency_s"]["tpot"][name].get<double>() == nearest_rank(tpots, p));
  }
  double sum = 0;
  for (double g : gaps) sum += g;
  CHECK(metrics["latency_s"]["itl"]["mean"].get<double>() == Approx(sum / static_cast<double>(gaps.size())).epsilon(1e-12));
}
