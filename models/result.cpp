#include "models/result.h"

#include <cmath>
#include <stdexcept>

namespace memtwin {

namespace {

// A NaN or an infinity in a result is a bug upstream (JSON would print it as null): stop there,
// naming the metric, rather than report it.
void refuse_non_finite(const nlohmann::ordered_json& value, const std::string& path) {
  if (value.is_number_float() && !std::isfinite(value.get<double>())) {
    throw std::logic_error("the result's " + path + " is not finite (" + std::to_string(value.get<double>()) +
                           "); please report the scenario");
  }
  if (value.is_object()) {
    for (const auto& [key, item] : value.items()) refuse_non_finite(item, path.empty() ? key : path + "." + key);
  } else if (value.is_array()) {
    for (std::size_t i = 0; i < value.size(); ++i) refuse_non_finite(value[i], path + "[" + std::to_string(i) + "]");
  }
}

}  // namespace

nlohmann::ordered_json result_document(const LoadedScenario& loaded, const RunResult& result) {
  refuse_non_finite(result.metrics, "");
  nlohmann::ordered_json doc;
  doc["schema"] = kResultSchema;
  doc["scenario"] = loaded.scenario.name;
  doc["backend"] = result.backend;
  doc["workload"] = workload_name(loaded.scenario);
  doc["seed"] = loaded.scenario.seed;
  for (const auto& [key, value] : result.metrics.items()) doc[key] = value;
  // The KV method's quality as measured on a real model (inference.kv_cache.quality): the same
  // for every backend, so that plans can require it.
  if (loaded.scenario.inference && loaded.scenario.inference->kv_cache.quality) {
    const KvQualityMeasured& q = *loaded.scenario.inference->kv_cache.quality;
    doc["quality"] = {{"method", q.method},
                      {"variant", q.variant},
                      {"measured_on", q.model},
                      {"budget", q.budget},
                      {"measured_budget", q.measured_budget},
                      {"perplexity", q.perplexity},
                      {"perplexity_delta", q.perplexity_delta},
                      {"kl", q.kl},
                      {"token_agreement", q.token_agreement},
                      {"retrieval", q.retrieval}};
  }
  doc["notes"] = result.notes;
  doc["input"] = loaded.resolved;
  return doc;
}

}  // namespace memtwin
