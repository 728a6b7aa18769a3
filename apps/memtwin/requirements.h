#pragma once
// The --require expressions of `memtwin plan`: a result path compared with a number, or a boolean
// result path. Checked against a run's JSON result.
#include <string>

#include <nlohmann/json.hpp>

namespace memtwin::cli {

struct Requirement {
  std::string text;  ///< as the user wrote it, for messages
  std::string path;  ///< dotted path into the result JSON
  std::string op;    ///< "<=", ">=", "<", ">", "==", "!=", or empty for a boolean path
  double value = 0;
};

/// Parses "PATH OP NUMBER" or "PATH"; throws UsageError when the right side is not a number.
Requirement parse_requirement(const std::string& text);

/// Why `result` fails the requirement ("PATH OP N fails (PATH = V)"), or "" when it meets it.
std::string unmet(const Requirement& r, const nlohmann::json& result);

}  // namespace memtwin::cli
