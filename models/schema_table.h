#pragma once
// The fluent table the schema's declarations are written in (internal to models/schema*.cpp):
//   t.add("training.micro_batch", K::integer, "1", "...").at_least(1)
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "models/enums.h"
#include "models/schema.h"

namespace memtwin::schema_detail {

template <class E, std::size_t N>
std::vector<std::string> names(const EnumNames<E, N>& table) {
  return {table.names.begin(), table.names.end()};
}

// Fluent declaration: param("training.micro_batch", integer, "1", "...").at_least(1)
class Decl {
 public:
  explicit Decl(ParamSpec& spec) : spec_(spec) {}
  Decl& at_least(double v) { spec_.min = v; return *this; }
  Decl& above(double v) { spec_.min = v; spec_.min_exclusive = true; return *this; }
  Decl& at_most(double v) { spec_.max = v; return *this; }
  Decl& choices(std::vector<std::string> c) { spec_.choices = std::move(c); return *this; }
  Decl& derived(std::string note) { spec_.default_note = std::move(note); return *this; }

 private:
  ParamSpec& spec_;
};

class Table {
 public:
  Decl add(std::string path, ValueKind kind, std::optional<std::string> def, std::string doc) {
    ParamSpec spec;
    spec.path = std::move(path);
    spec.kind = kind;
    spec.default_value = std::move(def);
    spec.doc = std::move(doc);
    params_.push_back(std::move(spec));
    return Decl(params_.back());
  }
  /// An entry declared elsewhere (the KV methods' parameters, models/kv/kv_method.h).
  void add(ParamSpec spec) { params_.push_back(std::move(spec)); }
  std::vector<ParamSpec> take() { return {params_.begin(), params_.end()}; }

 private:
  std::deque<ParamSpec> params_;  // a deque: Decl keeps a reference to the last element
};

using K = ValueKind;
constexpr auto none = std::nullopt;

/// The cluster section's keys (schema_cluster.cpp).
void declare_cluster(Table& t);

}  // namespace memtwin::schema_detail
