// memtwin run --seeds N: the spread of a serving answer over the workload's random draw.
#include <catch2/catch.hpp>

#include <cmath>

#include <nlohmann/json.hpp>

#include "tests/test_support.h"

using memtwin::test::run_memtwin;
using memtwin::test::source_path;

namespace {

const std::string kScenario = "scenarios/serving/llama3-8b-h100-fp16-kv.yaml";

nlohmann::json run_json(std::vector<std::string> extra) {
  std::vector<std::string> args = {"run", source_path(kScenario), "--backend", "sim", "--json",
                                   "--set", "inference.workload.requests=120"};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = run_memtwin(args);
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.out);
}

}  // namespace

TEST_CASE("run --seeds: the mean and Student-t interval of each metric over runs at consecutive seeds", "[unit]") {
  const nlohmann::json spread = run_json({"--set", "seed=5", "--seeds", "3"});
  REQUIRE(spread.contains("seeds"));
  const auto& seeds = spread["seeds"];
  CHECK(seeds["values"] == nlohmann::json::array({5, 6, 7}));
  CHECK(seeds["confidence"].get<double>() == Approx(0.95));

  // The same three runs, one seed each.
  std::vector<nlohmann::json> alone;
  for (int seed : {5, 6, 7}) alone.push_back(run_json({"--set", "seed=" + std::to_string(seed)}));
  // The result itself is the first seed's, unchanged by --seeds.
  nlohmann::json without = spread;
  without.erase("seeds");
  CHECK(without == alone[0]);

  for (const std::string path : {"latency_s.ttft.p50", "latency_s.tpot.p99", "throughput.output_tokens_per_s"}) {
    INFO(path);
    REQUIRE(seeds["metrics"].contains(path));
    const auto& m = seeds["metrics"][path];
    std::vector<double> v;
    for (const auto& r : alone) {
      std::string p = path;
      for (auto& c : p) if (c == '.') c = '/';
      v.push_back(r.at(nlohmann::json::json_pointer("/" + p)).get<double>());
    }
    const double mean = (v[0] + v[1] + v[2]) / 3;
    double squares = 0;
    for (double x : v) squares += (x - mean) * (x - mean);
    const double stddev = std::sqrt(squares / 2);
    CHECK(m["mean"].get<double>() == Approx(mean).epsilon(1e-12));
    CHECK(m["stddev"].get<double>() == Approx(stddev).epsilon(1e-9));
    // t(0.975, 2 degrees of freedom) = 4.302653 (any Student-t table).
    const double half = 4.302652729911275 * stddev / std::sqrt(3.0);
    CHECK(m["ci_low"].get<double>() == Approx(mean - half).epsilon(1e-9));
    CHECK(m["ci_high"].get<double>() == Approx(mean + half).epsilon(1e-9));
    CHECK(m["min"].get<double>() == Approx(std::min({v[0], v[1], v[2]})));
    CHECK(m["max"].get<double>() == Approx(std::max({v[0], v[1], v[2]})));
    CHECK(stddev > 0);  // the draw moves these metrics, else the interval says nothing
  }
  // The KV geometry does not depend on the draw and is not in the spread.
  CHECK_FALSE(seeds["metrics"].contains("kv_cache.capacity_blocks"));
  // Deterministic: the same seeds give the same document.
  CHECK(run_json({"--set", "seed=5", "--seeds", "3"}) == spread);
}

TEST_CASE("run --seeds is refused where it cannot mean anything", "[unit]") {
  auto zero = run_memtwin({"run", source_path(kScenario), "--seeds", "0"});
  CHECK(zero.exit_code == 2);
  CHECK_THAT(zero.err, Catch::Contains("--seeds must be from 1 to 1000"));
  auto training = run_memtwin({"run", source_path("scenarios/quickstart.yaml"), "--seeds", "3"});
  CHECK(training.exit_code == 2);
  CHECK_THAT(training.err, Catch::Contains("does not depend on the seed"));
  auto hw = run_memtwin({"run", source_path("scenarios/host/serve-fp16-kv.yaml"), "--backend", "hw", "--seeds", "2"});
  CHECK(hw.exit_code == 2);
  CHECK_THAT(hw.err, Catch::Contains("--set seed=N"));
}

TEST_CASE("plan --max-rate --seeds: the search at each seed, their mean and interval", "[unit]") {
  auto search = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {"plan", source_path(kScenario), "--max-rate", "1..64", "--set", "inference.workload.requests=200",
                                     "-j", "2", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = run_memtwin(args);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return nlohmann::json::parse(r.out)["max_rate"];
  };
  const auto both = search({"--set", "seed=3", "--seeds", "2"});
  const auto third = search({"--set", "seed=3"}), fourth = search({"--set", "seed=4"});
  const auto& seeds = both["seeds"];
  CHECK(seeds["values"] == nlohmann::json::array({3, 4}));
  // The answer itself is the scenario seed's search; each seed's answer is that seed's search alone.
  CHECK(both["sustained_per_s"] == third["sustained_per_s"]);
  CHECK(seeds["sustained_per_s_by_seed"] == nlohmann::json::array({third["sustained_per_s"], fourth["sustained_per_s"]}));
  const double a = third["sustained_per_s"].get<double>(), b = fourth["sustained_per_s"].get<double>();
  const auto& spread = seeds["sustained_per_s"];
  CHECK(spread["mean"].get<double>() == Approx((a + b) / 2));
  // t(0.975, 1) = 12.7062; stddev of two values = |a - b| / sqrt(2).
  const double half = 12.706204736174707 * std::fabs(a - b) / std::sqrt(2.0) / std::sqrt(2.0);
  CHECK(spread["ci_high"].get<double>() == Approx((a + b) / 2 + half));
  auto refused = run_memtwin({"plan", source_path(kScenario), "--search", "inference.serving.max_num_seqs=64,128", "--seeds", "2"});
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, Catch::Contains("give --max-rate"));
}
