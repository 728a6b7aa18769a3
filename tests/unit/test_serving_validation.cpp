// Published serving latencies the simulator is held to (issue 5: within 15%): TinyChat's batch-1
// decode and prefill on an A100 and an RTX 4090 (scenarios/validation/tinychat-*.yaml say where
// each number comes from). Each machine has one fitted parameter, its host dispatch time per layer
// (cluster.runtime.eager_layer_overhead), taken from one row; the test derives it again from that
// row so the scenario's value cannot drift from its stated origin, and every other row is a
// prediction with the catalog's datasheet figures and the default efficiencies.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>

#include "models/unit_parse.h"
#include "tests/test_support.h"

using memtwin::test::run_memtwin;
using memtwin::test::source_path;

namespace {

// The result of `memtwin run --json`; `exit_code` 3 is a scenario that does not fit in memory.
nlohmann::json simulate(const std::string& scenario, const std::vector<std::string>& sets, int exit_code = 0) {
  std::vector<std::string> args = {"run", source_path(scenario), "--backend", "sim", "--json"};
  for (const auto& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  auto r = run_memtwin(args);
  REQUIRE(r.exit_code == exit_code);
  return nlohmann::json::parse(r.out);
}

double mean_latency(const nlohmann::json& result, const char* which) {
  return result["latency_s"][which]["mean"].get<double>();
}

void check_case(const std::string& label, double predicted, double published) {
  const double error = (predicted - published) / published;
  WARN(label << ": predicted " << predicted * 1e3 << " ms, published " << published * 1e3 << " ms, error "
             << 100 * error << "%");
  CHECK(std::fabs(error) <= 0.15);
}

struct DecodeRow {
  const char* model;
  int layers;
  double fp16_ms;  // <= 0: published as out of memory
  double int4_ms;
};

// The host time per layer that makes the calibration row's predicted TPOT its published one.
double fitted_layer_overhead(const std::string& scenario, const DecodeRow& row) {
  const double gpu_only = mean_latency(simulate(scenario, {"model=" + std::string(row.model),
                                                           "cluster.runtime.eager_layer_overhead=0us"}),
                                       "tpot");
  return (row.fp16_ms * 1e-3 - gpu_only) / row.layers;
}

double scenario_layer_overhead(const std::string& scenario) {
  const auto given = simulate(scenario, {})["input"]["cluster"]["runtime"]["eager_layer_overhead"];
  return memtwin::parse_duration(given.get<std::string>()).value();
}

void check_decode_rows(const std::string& scenario, const std::string& gpu, const std::vector<DecodeRow>& rows) {
  // rows[0] is the calibration row: its FP16 latency fixes the host time per layer.
  const double fitted = fitted_layer_overhead(scenario, rows[0]);
  const double in_scenario = scenario_layer_overhead(scenario);
  INFO("fitted " << fitted * 1e6 << " us per layer, scenario says " << in_scenario * 1e6 << " us");
  CHECK(std::fabs(in_scenario - fitted) <= 0.02 * fitted);
  for (const auto& row : rows) {
    const std::string model = "model=" + std::string(row.model);
    if (row.fp16_ms > 0) {
      check_case(gpu + " " + row.model + " FP16 decode" + (&row == &rows[0] ? " (calibration row)" : ""),
                 mean_latency(simulate(scenario, {model}), "tpot"), row.fp16_ms * 1e-3);
    } else {
      INFO(gpu << " " << row.model << " FP16: published out of memory");
      CHECK_FALSE(simulate(scenario, {model}, 3)["memory"]["fits"].get<bool>());
    }
    check_case(gpu + " " + row.model + " AWQ W4A16 decode",
               mean_latency(simulate(scenario, {model, "inference.weights.dtype=awq_int4"}), "tpot"), row.int4_ms * 1e-3);
  }
}

}  // namespace

TEST_CASE("TinyChat batch-1 decode on an A100: FP16 and AWQ int4, three Llama models", "[validation]") {
  check_decode_rows("scenarios/validation/tinychat-a100.yaml", "A100",
                    {{"llama-2-7b", 32, 10.77, 5.71}, {"llama-3-8b", 32, 12.37, 6.29}, {"llama-2-13b", 40, 19.08, 7.90}});
}

TEST_CASE("TinyChat batch-1 decode on an RTX 4090: FP16 and AWQ int4, 13B FP16 out of memory", "[validation]") {
  check_decode_rows("scenarios/validation/tinychat-rtx4090.yaml", "RTX 4090",
                    {{"llama-2-7b", 32, 15.50, 5.28}, {"llama-3-8b", 32, 17.07, 6.39}, {"llama-2-13b", 40, 0, 9.19}});
}

TEST_CASE("TinyChat FP16 prefill on an RTX 4090: time to first token from 256 to 4096 prompt tokens", "[validation]") {
  const std::vector<int> lengths = {256, 512, 1024, 2048, 3072, 4096};
  const std::vector<std::pair<const char*, std::vector<double>>> published = {
      {"llama-3-8b", {0.031, 0.055, 0.109, 0.211, 0.336, 0.446}},
      {"llama-2-7b", {0.029, 0.058, 0.100, 0.211, 0.329, 0.441}}};
  for (const auto& [model, ttft] : published) {
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      // Llama-2 has 4096 positions: its longest prompt leaves room for the one token sampled.
      const int prompt = std::string(model) == "llama-2-7b" ? std::min(lengths[i], 4095) : lengths[i];
      const auto r = simulate("scenarios/validation/tinychat-rtx4090.yaml",
                              {"model=" + std::string(model), "inference.serving.max_model_len=" + std::string(prompt < 4096 ? "4096" : "8192"),
                               "inference.workload.prompt_tokens.value=" + std::to_string(prompt),
                               "inference.workload.output_tokens.value=1"});
      std::ostringstream label;
      label << "RTX 4090 " << model << " FP16 prefill of " << lengths[i] << " tokens";
      check_case(label.str(), mean_latency(r, "ttft"), ttft[i]);
    }
  }
}
