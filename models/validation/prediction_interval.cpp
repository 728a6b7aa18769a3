#include "models/validation/prediction_interval.h"

#include <algorithm>
#include <functional>
#include <set>
#include <stdexcept>

#include <yaml-cpp/yaml.h>

#include "models/embedded.h"
#include "models/memory/sharding_strategy.h"

namespace memtwin {

std::string parallelism_class(const Training& t) {
  if (t.parallelism.tensor > 1 || t.parallelism.pipeline > 1 || t.parallelism.context > 1) return "model_parallel";
  return gathers_parameters(t) ? "sharded_data_parallel" : "data_parallel";
}

const std::vector<ValidatedCase>& validated_cases() {
  static const std::vector<ValidatedCase> cases = [] {
    const auto text = embedded_file("presets/validated-errors.yaml");
    if (!text) throw std::logic_error("presets/validated-errors.yaml is not embedded");
    std::vector<ValidatedCase> out;
    for (const auto& node : YAML::Load(std::string(*text))["cases"]) {
      ValidatedCase c;
      c.label = node["case"].as<std::string>();
      c.scenario = node["scenario"].as<std::string>();
      c.set = node["set"].as<std::string>();
      c.generation = node["generation"].as<std::string>();
      c.parallelism = node["parallelism"].as<std::string>();
      c.gpus = node["gpus"].as<int>();
      c.error = node["error"].as<double>();
      out.push_back(std::move(c));
    }
    return out;
  }();
  return cases;
}

PredictionInterval step_time_interval(const Scenario& s, double step_s) {
  PredictionInterval p;
  const std::string generation =
      s.cluster.gpu.generation ? std::string(kGpuGenerationNames.name(*s.cluster.gpu.generation)) : std::string();
  const std::string parallelism = parallelism_class(*s.training);
  p.kind = (generation.empty() ? std::string("no generation") : generation) + ", " + parallelism;
  const auto same_kind = [&](const ValidatedCase& c) { return c.generation == generation && c.parallelism == parallelism; };
  const auto same_generation = [&](const ValidatedCase& c) { return c.generation == generation; };
  const auto any = [](const ValidatedCase&) { return true; };
  const std::pair<const char*, std::function<bool(const ValidatedCase&)>> pools[] = {
      {"kind", same_kind}, {"generation", same_generation}, {"all", any}};
  for (const auto& [name, member] : pools) {
    std::vector<const ValidatedCase*> chosen;
    std::set<std::string> configurations;
    for (const ValidatedCase& c : validated_cases()) {
      if (!member(c)) continue;
      chosen.push_back(&c);
      configurations.insert(c.scenario);
    }
    if (static_cast<int>(configurations.size()) < kMinConfigurations) continue;
    p.pool = name;
    p.cases = static_cast<int>(chosen.size());
    p.configurations = static_cast<int>(configurations.size());
    p.error_min = p.error_max = chosen.front()->error;
    for (const ValidatedCase* c : chosen) {
      p.error_min = std::min(p.error_min, c->error);
      p.error_max = std::max(p.error_max, c->error);
    }
    break;
  }
  // The scales validated for the kind itself, whatever pool gave the errors.
  bool first = true;
  for (const ValidatedCase& c : validated_cases()) {
    if (!same_kind(c)) continue;
    p.gpus_min = first ? c.gpus : std::min(p.gpus_min, c.gpus);
    p.gpus_max = first ? c.gpus : std::max(p.gpus_max, c.gpus);
    first = false;
  }
  if (p.cases == 0) return p;
  p.low_s = step_s / (1 + p.error_max);
  p.high_s = step_s / (1 + p.error_min);
  const int gpus = s.cluster.total_gpus();
  p.outside_scale = first || gpus > 2 * p.gpus_max || 2 * gpus < p.gpus_min;
  return p;
}

void add_step_interval(nlohmann::ordered_json& time, std::vector<std::string>& notes, const Scenario& s, double step_s,
                       double tokens_per_step) {
  const PredictionInterval p = step_time_interval(s, step_s);
  nlohmann::ordered_json about = {{"kind", p.kind}};
  if (p.cases == 0) {
    about["method"] = "no validated cases: no interval (docs/validation.md)";
    notes.push_back("no validated published runs: the step time carries no interval; see docs/validation.md");
  } else {
    about["pool"] = p.pool;
    about["validated_cases"] = p.cases;
    about["configurations"] = p.configurations;
    time["step_s_interval"] = {p.low_s, p.high_s};
    time["tokens_per_s_interval"] = {tokens_per_step / p.high_s, tokens_per_step / p.low_s};
    about["error_range"] = {p.error_min, p.error_max};
    if (p.gpus_max > 0) about["validated_gpus"] = {p.gpus_min, p.gpus_max};
    about["method"] = std::string("the range of the validated errors of ") +
                      (p.pool == "kind" ? "this kind" : p.pool == "generation" ? "this GPU generation (fewer than " +
                                                                                      std::to_string(kMinConfigurations) +
                                                                                      " configurations of this kind)"
                                                                                : "every validated case") +
                      " (docs/validation.md)";
    if (p.pool != "kind") {
      notes.push_back("fewer than " + std::to_string(kMinConfigurations) + " validated configurations are of this kind (" +
                      p.kind + "): the step-time interval borrows the errors of " +
                      (p.pool == "generation" ? "its GPU generation" : "every validated case"));
    }
    if (p.outside_scale) {
      notes.push_back(p.gpus_max == 0 ? "no validated run is of this kind (" + p.kind + "): the interval is an extrapolation"
                                      : "the cluster's " + std::to_string(s.cluster.total_gpus()) + " GPUs lie beyond the " +
                                            std::to_string(p.gpus_min) + "-" + std::to_string(p.gpus_max) +
                                            " GPUs validated for " + p.kind + ": the interval is an extrapolation");
    }
  }
  time["interval"] = about;
}

}  // namespace memtwin
