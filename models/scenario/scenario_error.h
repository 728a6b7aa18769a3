#pragma once
// The one error type for bad scenarios: it names where (file, line, column), which key (dotted
// path) and what is wrong, so the CLI can print "file:line:col: error: key: message" and exit 2.
#include <stdexcept>
#include <string>

namespace memtwin {

struct SourceLocation {
  std::string file;  ///< a path, "--set KEY=VALUE", or "<embedded NAME>"
  int line = 0;      ///< 1-based; 0 when the source has no lines (a --set override)
  int column = 0;    ///< 1-based
  [[nodiscard]] std::string str() const;
};

class ScenarioError : public std::runtime_error {
 public:
  ScenarioError(SourceLocation where, std::string key, std::string message);
  [[nodiscard]] const SourceLocation& where() const { return where_; }
  [[nodiscard]] const std::string& key() const { return key_; }
  [[nodiscard]] const std::string& message() const { return message_; }

 private:
  SourceLocation where_;
  std::string key_;
  std::string message_;
};

}  // namespace memtwin
