#pragma once
// Stage 1 of loading: the YAML document as the user meant it. Reads the file, applies --set
// overrides, expands shorthands (`gpu: h100-sxm` -> `gpu: {preset: h100-sxm}`), merges catalog
// presets and HuggingFace config.json files under the user's keys. Every key remembers which
// source it came from, so later errors point at the right file and line.
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "models/scenario/scenario_error.h"

namespace memtwin {

struct ScenarioTree {
  YAML::Node root;
  std::string file;       ///< the scenario's own path (or "<embedded quickstart.yaml>")
  std::string base_dir;   ///< relative paths in the scenario resolve against this
  /// Keys that came from somewhere other than the scenario file: dotted path -> source name.
  /// A path covers everything under it. Sources without line numbers start with "--set".
  std::map<std::string, std::string> origins;

  /// Where the node at `path` (with YAML mark `mark`) came from.
  [[nodiscard]] SourceLocation locate(const std::string& path, const YAML::Mark& mark) const;
};

/// Parses `text` (named `file` in messages), applies `overrides` ("key.path=value") and expands
/// shorthands, presets and hf_config. Throws ScenarioError.
ScenarioTree build_scenario_tree(std::string_view text, const std::string& file, const std::string& base_dir,
                                 const std::vector<std::string>& overrides);

/// The catalog entries ("presets/gpus.yaml" or "presets/models.yaml"), in file order.
std::vector<std::string> catalog_names(std::string_view catalog_file);

}  // namespace memtwin
