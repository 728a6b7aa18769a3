#include "models/scenario/yaml_limits.h"

#include <filesystem>
#include <functional>

#include "models/scenario/scenario_error.h"

namespace memtwin {

void refuse_unreadable_yaml_file(const std::string& path, const SourceLocation& where, const std::string& key,
                                 const std::string& what) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) throw ScenarioError(where, key, "cannot read " + what + " " + path + " (does it exist?)");
  if (!std::filesystem::is_regular_file(status)) {
    throw ScenarioError(where, key, path + " is not a regular file (" + what + " must be a YAML file)");
  }
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxYamlFileBytes) {
    throw ScenarioError(where, key, path + " is " + std::to_string(size >> 20) + " MiB: " + what + " is at most " +
                                        std::to_string(kMaxYamlFileBytes >> 20) + " MiB");
  }
}

void refuse_alias_expansion(const YAML::Node& root, const std::string& file, std::size_t limit) {
  std::size_t visited = 0;
  // Depth-first, as the readers walk; stops at the limit, so the check itself is bounded.
  std::function<void(const YAML::Node&)> walk = [&](const YAML::Node& node) {
    if (++visited > limit) {
      throw ScenarioError({file, node.Mark().line + 1, node.Mark().column + 1}, "",
                          "the document expands to more than " + std::to_string(limit) +
                              " nodes (YAML aliases repeating a large mapping?); write the values out");
    }
    if (node.IsMap()) {
      for (auto it = node.begin(); it != node.end(); ++it) {
        walk(it->first);
        walk(it->second);
      }
    } else if (node.IsSequence()) {
      for (auto it = node.begin(); it != node.end(); ++it) walk(*it);
    }
  };
  walk(root);
}

}  // namespace memtwin
