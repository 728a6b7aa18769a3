// Published step times the simulator is held to (issue 4: within 15%, efficiencies not tuned per
// case). Each case prints its error. Korthikanti Table 5's 530B row (35 stages) and Megatron-LM
// Table 1 are still to be added.
#include <catch2/catch.hpp>

#include <cmath>

#include <nlohmann/json.hpp>

#include "tests/test_support.h"

using memtwin::test::run_memtwin;
using memtwin::test::source_path;

namespace {

double simulated_step(const std::string& scenario, const std::vector<std::string>& sets) {
  std::vector<std::string> args = {"run", source_path(scenario), "--backend", "sim", "--json"};
  for (const auto& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  auto r = run_memtwin(args);
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.out)["time"]["step_s"].get<double>();
}

void check_case(const char* label, double predicted, double published) {
  const double error = (predicted - published) / published;
  WARN(label << ": predicted " << predicted << " s, published " << published << " s, error " << 100 * error << "%");
  CHECK(std::fabs(error) <= 0.15);
}

}  // namespace

const std::vector<std::string> kSelective = {"training.activation_checkpointing=selective",
                                             "training.parallelism.sequence_parallel=true"};

TEST_CASE("Korthikanti et al. Table 5: the 22B GPT on 8 A100s", "[validation]") {
  const char* file = "scenarios/validation/korthikanti-22b-a100.yaml";
  check_case("22B full recompute", simulated_step(file, {}), 1.42);
  check_case("22B selective recompute + sequence parallel", simulated_step(file, kSelective), 1.10);
}

TEST_CASE("Korthikanti et al. Table 5: the 175B GPT on 64 A100s (pipeline 8, interleaved)", "[validation]") {
  const char* file = "scenarios/validation/korthikanti-175b-a100.yaml";
  check_case("175B full recompute", simulated_step(file, {}), 18.13);
  check_case("175B selective recompute + sequence parallel", simulated_step(file, kSelective), 13.75);
}

// 512 simulated ranks with 512 micro-batches each: about 40 s per case on one core, so hidden
// from the default run (scripts/validate-slow.sh runs it).
TEST_CASE("Korthikanti et al. Table 5: the 1T GPT on 512 A100s (pipeline 64)", "[validation][.slow]") {
  const char* file = "scenarios/validation/korthikanti-1t-a100.yaml";
  check_case("1T full recompute", simulated_step(file, {}), 94.42);
  check_case("1T selective recompute + sequence parallel", simulated_step(file, kSelective), 71.49);
}
