// Prediction intervals (time.step_s_interval): the range of the validated errors of a scenario's
// kind, borrowed from its GPU generation (or from every case) when the kind has too few distinct
// configurations; the validated errors themselves are checked against fresh runs by the
// validation tests.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "models/scenario_loader.h"
#include "models/validation/prediction_interval.h"
#include "tests/test_support.h"
#include "tests/unit/sim_helpers.h"

using namespace memtwin;
using test::write_scenario;

namespace {

Scenario scenario(const std::string& gpu, const std::string& parallelism, int nodes) {
  return load_scenario_file(write_scenario("interval-" + gpu, "name: interval\ncluster: {nodes: " + std::to_string(nodes) +
                                                                 ", gpus_per_node: 8, gpu: " + gpu +
                                                                 "}\nmodel: llama-2-13b\ntraining: {micro_batch: 1, "
                                                                 "seq_len: 4096, global_batch: 64" +
                                                                 parallelism + "}\n"))
      .scenario;
}

// The extreme errors and the configurations of the cases `keep` selects.
struct Pool {
  double low = 1e9, high = -1e9;
  std::set<std::string> configurations;
  int cases = 0;
};
template <class Keep>
Pool pool_of(Keep keep) {
  Pool p;
  for (const auto& c : validated_cases()) {
    if (!keep(c)) continue;
    p.low = std::min(p.low, c.error);
    p.high = std::max(p.high, c.error);
    p.configurations.insert(c.scenario);
    ++p.cases;
  }
  return p;
}

}  // namespace

TEST_CASE("the step-time interval is the range of the validated errors of the scenario's kind", "[unit]") {
  const Scenario s = scenario("h100-sxm", ", parallelism: {tensor: 4, pipeline: 2}", 16);
  REQUIRE(parallelism_class(*s.training) == "model_parallel");
  const Pool kind = pool_of([](const ValidatedCase& c) { return c.generation == "hopper" && c.parallelism == "model_parallel"; });
  REQUIRE(static_cast<int>(kind.configurations.size()) >= kMinConfigurations);
  const PredictionInterval p = step_time_interval(s, 10.0);
  CHECK(p.pool == "kind");
  CHECK(p.cases == kind.cases);
  CHECK(p.error_min == kind.low);
  CHECK(p.error_max == kind.high);
  // A model that errs fast (negative errors) puts the truth above its prediction.
  CHECK(p.low_s == Approx(10.0 / (1 + kind.high)));
  CHECK(p.high_s == Approx(10.0 / (1 + kind.low)));
  CHECK(p.high_s > 10.0);
  CHECK_FALSE(p.outside_scale);
}

TEST_CASE("a kind with too few configurations borrows its generation's errors, and far scales are flagged", "[unit]") {
  // Plain data parallelism on A100s: one validated configuration (Megatron-LM's 1.7B on 32 GPUs).
  const Scenario replicated = scenario("a100-80gb", "", 1);
  REQUIRE(parallelism_class(*replicated.training) == "data_parallel");
  const Pool kind = pool_of([](const ValidatedCase& c) { return c.generation == "ampere" && c.parallelism == "data_parallel"; });
  REQUIRE(static_cast<int>(kind.configurations.size()) < kMinConfigurations);
  const PredictionInterval p = step_time_interval(replicated, 1.0);
  CHECK(p.pool == "generation");
  const Pool ampere = pool_of([](const ValidatedCase& c) { return c.generation == "ampere"; });
  CHECK(p.cases == ampere.cases);
  CHECK(p.error_min == ampere.low);
  CHECK(p.error_max == ampere.high);
  // 8 GPUs against the 32 validated for the kind.
  CHECK(p.outside_scale);

  std::vector<std::string> notes;
  nlohmann::ordered_json time;
  add_step_interval(time, notes, replicated, 1.0, 1e6);
  CHECK(time["interval"]["pool"] == "generation");
  CHECK(time["step_s_interval"][0].get<double>() == Approx(p.low_s));
  CHECK(time["tokens_per_s_interval"][1].get<double>() == Approx(1e6 / p.low_s));
  REQUIRE(notes.size() == 2);
  CHECK_THAT(notes[0], Catch::Contains("borrows the errors of its GPU generation"));
  CHECK_THAT(notes[1], Catch::Contains("extrapolation"));
}

TEST_CASE("a GPU of no validated generation gets every validated case's range and says so", "[unit]") {
  const Scenario l40s = scenario("l40s", ", parallelism: {tensor: 2}", 2);
  const PredictionInterval p = step_time_interval(l40s, 2.0);
  CHECK(p.pool == "all");
  CHECK(p.cases == static_cast<int>(validated_cases().size()));
  CHECK(p.outside_scale);
}

TEST_CASE("the simulator reports the interval with the step time", "[unit]") {
  const auto doc = test::sim_run(test::source_path("scenarios/quickstart.yaml"));
  const auto& time = doc["time"];
  REQUIRE(time.contains("step_s_interval"));
  CHECK(time["step_s_interval"][0].get<double>() <= time["step_s_interval"][1].get<double>());
  CHECK(time["interval"]["kind"] == "hopper, sharded_data_parallel");
}
