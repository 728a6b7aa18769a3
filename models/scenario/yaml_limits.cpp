#include "models/scenario/yaml_limits.h"

#include <functional>

#include "models/scenario/scenario_error.h"

namespace memtwin {

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
