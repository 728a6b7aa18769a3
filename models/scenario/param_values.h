#pragma once
// Stage 2 of loading: every key checked against the schema and every value converted by its kind.
// ParamValues then answers typed questions ("training.micro_batch as an integer") with the schema's
// default where the user gave nothing, and raises ScenarioError at the value's own location.
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/enums.h"
#include "models/scenario/scenario_error.h"
#include "models/scenario/scenario_tree.h"
#include "models/schema.h"
#include "models/units.h"

namespace memtwin {

struct ParamValue {
  const ParamSpec* spec = nullptr;
  std::string text;                ///< canonical text (units re-printed exactly)
  double number = 0;               ///< numeric kinds, in base units (bytes, B/s, s, FLOP/s, 1/s)
  std::int64_t bytes = 0;          ///< bytes kind, exact
  bool flag = false;               ///< boolean kind
  std::vector<std::string> items;  ///< choice_list kind
  SourceLocation where;
  bool from_default = false;
};

class ParamValues {
 public:
  /// Validates `tree` against the schema. Throws ScenarioError on the first problem.
  explicit ParamValues(const ScenarioTree& tree);

  /// True when the user (or a preset, or an override) gave the key; defaults do not count.
  [[nodiscard]] bool given(const std::string& path) const;
  /// True when the scenario itself (or an override) gave the key: not a default, not a catalog
  /// entry's value. Calibration files replace catalog values but never the user's own.
  [[nodiscard]] bool given_by_user(const std::string& path) const;
  /// True when the section appears in the document.
  [[nodiscard]] bool has_section(const std::string& path) const;

  // Typed access; a missing value without a default is an error ("... is required").
  [[nodiscard]] std::int64_t integer(const std::string& path) const;
  [[nodiscard]] int int32(const std::string& path) const;
  [[nodiscard]] double number(const std::string& path) const;
  [[nodiscard]] bool flag(const std::string& path) const;
  [[nodiscard]] const std::string& text(const std::string& path) const;
  [[nodiscard]] Bytes bytes(const std::string& path) const;
  [[nodiscard]] BytesPerSec bandwidth(const std::string& path) const;
  [[nodiscard]] Seconds duration(const std::string& path) const;
  [[nodiscard]] FlopsPerSec flops_rate(const std::string& path) const;
  [[nodiscard]] const std::vector<std::string>& items(const std::string& path) const;
  template <class E, std::size_t N>
  [[nodiscard]] E choice(const std::string& path, const EnumNames<E, N>& table) const {
    auto parsed = table.parse(text(path));
    if (!parsed) fail(path, "internal: choice '" + text(path) + "' has no enum value");
    return *parsed;
  }

  /// Where a key is, or its section when the key is absent.
  [[nodiscard]] SourceLocation where(const std::string& path) const;
  [[noreturn]] void fail(const std::string& path, const std::string& message) const;

  /// The resolved document, nested by path: every given value, and every default that a builder
  /// read (so an echo holds only what applies: no LoRA rank for full fine-tuning).
  [[nodiscard]] nlohmann::ordered_json resolved_json() const;
  [[nodiscard]] const std::string& base_dir() const { return base_dir_; }

 private:
  ParamValues() = default;  // for converting schema defaults
  void walk(const YAML::Node& node, const std::string& section, const ScenarioTree& tree);
  void convert(const YAML::Node& value, const ParamSpec& spec, SourceLocation where);
  void fill_defaults();
  const ParamValue& get(const std::string& path) const;

  std::map<std::string, ParamValue> values_;
  std::map<std::string, SourceLocation> sections_;
  mutable std::set<std::string> read_;  // paths the builders asked for
  SourceLocation document_;
  std::string base_dir_;
};

}  // namespace memtwin
