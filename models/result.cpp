#include "models/result.h"

namespace memtwin {

nlohmann::ordered_json result_document(const LoadedScenario& loaded, const RunResult& result) {
  nlohmann::ordered_json doc;
  doc["schema"] = kResultSchema;
  doc["scenario"] = loaded.scenario.name;
  doc["backend"] = result.backend;
  doc["workload"] = loaded.scenario.training ? "training" : "inference";
  doc["seed"] = loaded.scenario.seed;
  for (const auto& [key, value] : result.metrics.items()) doc[key] = value;
  doc["notes"] = result.notes;
  doc["input"] = loaded.resolved;
  return doc;
}

}  // namespace memtwin
