#pragma once
// Loading a scenario: YAML text -> validated, typed Scenario. The only place that reads YAML.
//
// Contract: on success every value is valid and defaults are filled; on any problem a
// ScenarioError is thrown naming the file (or --set override), line, column and key path.
// Catalog presets, HuggingFace config.json files and --set overrides are applied here.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/scenario.h"
#include "models/scenario/scenario_error.h"

namespace memtwin {

struct LoadedScenario {
  Scenario scenario;
  nlohmann::ordered_json resolved;  ///< the scenario as resolved (presets, defaults), reloadable
};

/// Loads a scenario file. `overrides` are "key.path=value" strings applied before validation.
LoadedScenario load_scenario_file(const std::string& path, const std::vector<std::string>& overrides = {});

/// Loads scenario text; `name` is used in messages, `base_dir` resolves relative paths.
LoadedScenario load_scenario_text(std::string_view text, const std::string& name, const std::string& base_dir,
                                  const std::vector<std::string>& overrides = {});

/// The default scenario compiled into the binary (scenarios/quickstart.yaml).
LoadedScenario load_quickstart_scenario(const std::vector<std::string>& overrides = {});

/// A catalog GPU or model as a typed spec (for listings). Throws ScenarioError for unknown names.
GpuSpec catalog_gpu(const std::string& name);
ModelSpec catalog_model(const std::string& name);
std::vector<std::string> catalog_gpu_names();
std::vector<std::string> catalog_model_names();

}  // namespace memtwin
