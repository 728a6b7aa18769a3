#pragma once
// Dotted paths into result documents ("latency_s.ttft.p99"), as sweeps, plans and requirements
// name the fields of memtwin.result/1.
#include <optional>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace memtwin::cli {

/// The node at `path`, or nullptr when any part is missing.
inline const nlohmann::json* find_path(const nlohmann::json& doc, const std::string& path) {
  const nlohmann::json* node = &doc;
  std::stringstream ss(path);
  for (std::string part; std::getline(ss, part, '.');) {
    if (!node->is_object() || !node->contains(part)) return nullptr;
    node = &(*node)[part];
  }
  return node;
}

/// The number (booleans as 1 and 0) at `path`, if there is one.
inline std::optional<double> number_at(const nlohmann::json& doc, const std::string& path) {
  const nlohmann::json* node = find_path(doc, path);
  if (!node) return std::nullopt;
  if (node->is_boolean()) return node->get<bool>() ? 1.0 : 0.0;
  if (node->is_number()) return node->get<double>();
  return std::nullopt;
}

}  // namespace memtwin::cli
