#pragma once
// Prediction intervals for simulated step times, from the errors of the validated cases of the
// same kind (docs/validation.md). The validated errors live in scenarios/presets/validated-errors.yaml,
// compiled into the binary; the validation tests fail when a stored error no longer matches a
// fresh run, so the intervals cannot drift from what the model does.
//
// A kind is the GPU generation and the parallelism class of a training scenario. With n cases of
// a kind whose errors e = (simulated - published) / published range over [e_min, e_max], a run's
// true step time is taken to lie in [S / (1 + e_max), S / (1 + e_min)]; if new cases are
// exchangeable with the validated ones, about (n - 1) / (n + 1) of them fall inside. A kind with
// fewer than kMinConfigurations distinct configurations (scenario files: one run at several
// scales is one configuration) borrows the errors of its whole GPU generation, and failing that
// of every validated case; the result says which pool it used.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/scenario.h"

namespace memtwin {

/// "model_parallel" (tensor, pipeline or context parallel), "sharded_data_parallel" (ZeRO-3 /
/// FSDP gathering parameters, none of those) or "data_parallel" (the rest).
std::string parallelism_class(const Training& training);

inline constexpr int kMinConfigurations = 3;

struct ValidatedCase {
  std::string label;
  std::string scenario;        ///< the scenario file's stem: one configuration
  std::string set;             ///< "fit" (defaults were chosen against it) or "test" (held out)
  std::string generation;      ///< cluster.gpu.generation
  std::string parallelism;     ///< parallelism_class()
  int gpus = 0;
  double error = 0;            ///< (simulated - published) / published
};

/// The validated cases, parsed once from the embedded residuals file.
const std::vector<ValidatedCase>& validated_cases();

struct PredictionInterval {
  std::string kind;            ///< "<generation>, <parallelism class>"
  std::string pool;            ///< whose errors: "kind", "generation" or "all"
  int cases = 0;               ///< validated cases of the pool
  int configurations = 0;      ///< distinct scenario files among them
  double error_min = 0, error_max = 0;
  double low_s = 0, high_s = 0;  ///< the interval for the step time (when cases > 0)
  int gpus_min = 0, gpus_max = 0;
  bool outside_scale = false;  ///< more than 2x beyond the GPU counts validated for the kind
};

PredictionInterval step_time_interval(const Scenario& scenario, double simulated_step_s);

/// Writes `step_s_interval`, `tokens_per_s_interval` and `interval` (kind, cases, error range) into
/// a result's "time" object; a note says when no validated case is of the kind, or the GPU count
/// lies beyond the validated ones.
void add_step_interval(nlohmann::ordered_json& time, std::vector<std::string>& notes, const Scenario& scenario,
                       double simulated_step_s, double tokens_per_step);

}  // namespace memtwin
