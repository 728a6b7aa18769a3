#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "models/analytic/fit_search.h"
#include "models/memory/training_memory.h"
#include "models/scenario_loader.h"
#include "tests/test_support.h"

using namespace memtwin;

TEST_CASE("fit search finds the boundary and skips invalid values", "[unit]") {
  // Fits up to 37; only even values (and 37) are valid.
  auto probe = [](std::int64_t v) {
    if (v % 2 == 1 && v != 37) return Probe::invalid;
    return v <= 37 ? Probe::fits : Probe::does_not_fit;
  };
  FitAnswer a = fit_search(probe, 1, 1 << 20, FitDirection::largest);
  REQUIRE(a.value);
  CHECK(*a.value == 37);
  CHECK(*a.first_failing == 38);
  CHECK(a.evaluations < 200);

  // Smallest: fits from 24 on, only multiples of 8 valid.
  auto nodes = [](std::int64_t v) {
    if (v % 8 != 0) return Probe::invalid;
    return v >= 24 ? Probe::fits : Probe::does_not_fit;
  };
  FitAnswer b = fit_search(nodes, 1, 4096, FitDirection::smallest);
  REQUIRE(b.value);
  CHECK(*b.value == 24);
  CHECK(*b.first_failing == 16);

  FitAnswer none = fit_search([](std::int64_t) { return Probe::does_not_fit; }, 1, 1000, FitDirection::largest);
  CHECK_FALSE(none.value);
}

TEST_CASE("memtwin fit answers the largest sequence length, consistent with run", "[unit]") {
  const std::string file = test::source_path("scenarios/quickstart.yaml");
  auto r = test::run_memtwin({"fit", file, "--vary", "training.seq_len", "--json"});
  REQUIRE(r.exit_code == 0);
  auto doc = nlohmann::json::parse(r.out);
  const long long best = doc["value"];
  // The answer fits and one more token does not, by the same model `run` uses.
  CHECK(training_memory(load_scenario_file(file, {"training.seq_len=" + std::to_string(best)}).scenario).fits());
  CHECK_FALSE(training_memory(load_scenario_file(file, {"training.seq_len=" + std::to_string(best + 1)}).scenario).fits());
}

TEST_CASE("memtwin fit finds the smallest cluster and refuses non-integer keys", "[unit]") {
  auto r = test::run_memtwin({"fit", test::source_path("scenarios/training/llama2-70b-fsdp-64xh100.yaml"), "--vary",
                              "cluster.nodes", "--set", "cluster.gpu=a100-40gb", "--json"});
  REQUIRE(r.exit_code == 0);
  auto doc = nlohmann::json::parse(r.out);
  CHECK(doc["value"] == 8);
  CHECK(doc["first_failing"] == 4);
  auto bad = test::run_memtwin({"fit", test::source_path("scenarios/quickstart.yaml"), "--vary", "cluster.gpu.memory"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("needs an integer scenario key"));
}
