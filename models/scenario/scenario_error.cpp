#include "models/scenario/scenario_error.h"

namespace memtwin {

std::string SourceLocation::str() const {
  if (line <= 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

namespace {
std::string compose(const SourceLocation& where, const std::string& key, const std::string& message) {
  std::string out = where.str() + ": error: ";
  if (!key.empty()) out += key + ": ";
  return out + message;
}
}  // namespace

ScenarioError::ScenarioError(SourceLocation where, std::string key, std::string message)
    : std::runtime_error(compose(where, key, message)),
      where_(std::move(where)),
      key_(std::move(key)),
      message_(std::move(message)) {}

}  // namespace memtwin
