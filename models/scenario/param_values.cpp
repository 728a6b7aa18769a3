#include "models/scenario/param_values.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

#include "models/scenario/did_you_mean.h"
#include "models/unit_parse.h"

namespace memtwin {
namespace {

// Whether `spelled` names `choice`: the same letters whatever their case, '_' standing for '-'.
bool same_choice(const std::string& choice, const std::string& spelled) {
  if (choice.size() != spelled.size()) return false;
  for (std::size_t i = 0; i < choice.size(); ++i) {
    const char a = choice[i] == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(choice[i])));
    const char b = spelled[i] == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(spelled[i])));
    if (a != b) return false;
  }
  return true;
}

// The choice `spelled` names, or nullptr.
const std::string* find_choice(const std::vector<std::string>& choices, const std::string& spelled) {
  const auto it = std::find_if(choices.begin(), choices.end(), [&](const std::string& c) { return same_choice(c, spelled); });
  return it == choices.end() ? nullptr : &*it;
}

std::string join(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string node_type_name(const YAML::Node& n) {
  if (n.IsMap()) return "a mapping";
  if (n.IsSequence()) return "a list";
  if (n.IsNull()) return "nothing";
  return "'" + n.Scalar() + "'";
}

std::optional<double> parse_real(const std::string& text) {
  const std::optional<double> v = parse_plain_number(text);
  if (!v || !std::isfinite(*v)) return std::nullopt;
  return v;
}

std::string shortest(double v) {
  std::ostringstream s;
  s.precision(15);
  s << v;
  return s.str();
}

// Sections whose defaults apply only when the user wrote the section.
bool optional_section_absent(const std::string& path, const std::map<std::string, SourceLocation>& sections) {
  for (const char* optional : {"training", "inference", "cluster.nvme"}) {
    std::string prefix = std::string(optional) + ".";
    if (path.rfind(prefix, 0) == 0 && !sections.count(optional)) return true;
  }
  return false;
}

}  // namespace

ParamValues::ParamValues(const ScenarioTree& tree) : base_dir_(tree.base_dir) {
  document_ = {tree.file, 1, 1};
  sections_[""] = document_;
  walk(tree.root, "", tree);
  fill_defaults();
}

void ParamValues::walk(const YAML::Node& node, const std::string& section, const ScenarioTree& tree) {
  std::set<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const YAML::Node key_node = it->first;  // a copy: the iterator hands out a temporary
    SourceLocation key_where = tree.locate(section, key_node.Mark());
    if (!key_node.IsScalar()) {
      throw ScenarioError(key_where, section, "keys must be plain names, not " + node_type_name(key_node));
    }
    const std::string key = key_node.Scalar();
    const std::string path = section.empty() ? key : section + "." + key;
    key_where = tree.locate(path, key_node.Mark());
    if (!seen.insert(key).second) throw ScenarioError(key_where, path, "duplicate key");
    const YAML::Node value = it->second;
    SourceLocation value_where = tree.locate(path, value.Mark().line >= 0 ? value.Mark() : key_node.Mark());

    if (const ParamSpec* spec = find_param(path)) {
      convert(value, *spec, value_where);
    } else if (is_section(path)) {
      if (!value.IsMap()) {
        throw ScenarioError(value_where, path,
                            "expected a mapping with keys " + join(section_keys(path)) + ", got " + node_type_name(value));
      }
      sections_[path] = key_where;
      walk(value, path, tree);
    } else {
      std::string message = "unknown key '" + key + "'";
      std::string hint = did_you_mean(key, section_keys(section));
      if (hint.empty()) {
        // Right name, wrong place? ("micro_batch" under training.parallelism)
        for (const auto& p : schema_params()) {
          if (p.path.size() > key.size() && p.path.compare(p.path.size() - key.size(), key.size(), key) == 0 &&
              p.path[p.path.size() - key.size() - 1] == '.') {
            hint = " (did you mean '" + p.path + "'?)";
            break;
          }
        }
      }
      std::string allowed = section.empty() ? "" : "; '" + section + "' takes " + join(section_keys(section));
      if (section.empty()) allowed = "; a scenario takes " + join(section_keys(""));
      throw ScenarioError(key_where, path, message + hint + allowed);
    }
  }
}

void ParamValues::convert(const YAML::Node& value, const ParamSpec& spec, SourceLocation where) {
  auto fail_here = [&](const std::string& message) { throw ScenarioError(where, spec.path, message); };
  ParamValue out;
  out.spec = &spec;
  out.where = where;

  if (spec.kind == ValueKind::choice_list) {
    std::vector<std::string> items;
    if (value.IsScalar()) {
      items.push_back(value.Scalar());
    } else if (value.IsSequence()) {
      for (const auto& item : value) {
        if (!item.IsScalar()) fail_here("expected a list of names, found " + node_type_name(item));
        items.push_back(item.Scalar());
      }
    } else {
      fail_here("expected a list of " + join(spec.choices) + ", got " + node_type_name(value));
    }
    std::set<std::string> unique;
    for (auto& item : items) {
      const std::string* same = find_choice(spec.choices, item);
      if (!same) {
        fail_here("'" + item + "' is not one of " + join(spec.choices) + did_you_mean(item, spec.choices));
      }
      item = *same;
      if (!unique.insert(item).second) fail_here("'" + item + "' is listed twice");
    }
    out.items = items;
    out.text = "[" + join(items) + "]";
    values_[spec.path] = out;
    return;
  }

  if (value.IsNull()) fail_here("has no value");
  if (!value.IsScalar()) fail_here("expected " + std::string(kind_name(spec.kind)) + ", got " + node_type_name(value));
  const std::string& raw = value.Scalar();
  out.text = raw;

  auto check_range = [&](double v) {
    if (spec.min && (spec.min_exclusive ? v <= *spec.min : v < *spec.min)) {
      fail_here("'" + raw + "' must be " + (spec.min_exclusive ? "greater than " : "at least ") + shortest(*spec.min));
    }
    if (spec.max && v > *spec.max) fail_here("'" + raw + "' must be at most " + shortest(*spec.max));
  };

  try {
    switch (spec.kind) {
      case ValueKind::integer: {
        auto v = parse_real(raw);
        if (!v || std::floor(*v) != *v || std::fabs(*v) > 0x1p53) fail_here("expected a whole number, got '" + raw + "'");
        check_range(*v);
        out.number = *v;
        out.text = std::to_string(static_cast<std::int64_t>(*v));
        break;
      }
      case ValueKind::number: {
        auto v = parse_real(raw);
        if (!v) fail_here("expected a number, got '" + raw + "'");
        check_range(*v);
        out.number = *v;
        break;
      }
      case ValueKind::boolean: {
        if (raw == "true" || raw == "True" || raw == "TRUE") {
          out.flag = true;
        } else if (raw == "false" || raw == "False" || raw == "FALSE") {
          out.flag = false;
        } else {
          fail_here("expected true or false, got '" + raw + "'");
        }
        out.text = out.flag ? "true" : "false";
        break;
      }
      case ValueKind::choice: {
        // Frameworks spell the same choice in capitals or with underscores for dashes (PyTorch's
        // ShardingStrategy.FULL_SHARD, accelerate's `fsdp_sharding_strategy: FULL_SHARD`): such a
        // spelling means the choice, and the resolved scenario carries the choice's own name.
        const std::string* same = find_choice(spec.choices, raw);
        if (!same) {
          fail_here("'" + raw + "' is not one of " + join(spec.choices, " | ") + did_you_mean(raw, spec.choices));
        }
        out.text = *same;
        break;
      }
      case ValueKind::bytes: {
        Bytes b = parse_bytes(raw);
        check_range(b.as_double());
        out.bytes = b.count();
        out.number = b.as_double();
        out.text = format_bytes(b);
        break;
      }
      case ValueKind::bandwidth: {
        BytesPerSec r = parse_bandwidth(raw);
        check_range(r.value());
        out.number = r.value();
        out.text = format_bandwidth(r);
        break;
      }
      case ValueKind::duration: {
        Seconds s = parse_duration(raw);
        check_range(s.value());
        out.number = s.value();
        out.text = format_duration(s);
        break;
      }
      case ValueKind::flops_rate: {
        FlopsPerSec f = parse_flops_rate(raw);
        check_range(f.value());
        out.number = f.value();
        out.text = format_flops_rate(f);
        break;
      }
      case ValueKind::rate: {
        double r = parse_rate_per_second(raw);
        check_range(r);
        out.number = r;
        out.text = shortest(r) + "/s";
        break;
      }
      case ValueKind::path: {
        // Relative to the file that names it; a path given on the command line (--set) is
        // relative to the current directory, as the shell's are.
        std::filesystem::path p = raw;
        const bool from_command_line = where.file.rfind("--set ", 0) == 0;
        if (p.is_relative() && !base_dir_.empty() && !from_command_line) p = std::filesystem::path(base_dir_) / p;
        if (!std::filesystem::exists(p)) fail_here("file not found: " + p.string());
        // A directory, a device (/dev/zero) or a FIFO would fail or never finish being read.
        if (!std::filesystem::is_regular_file(p)) fail_here(p.string() + " is not a regular file");
        out.text = p.lexically_normal().string();
        break;
      }
      case ValueKind::text:
      case ValueKind::preset:
      case ValueKind::choice_list:
        break;
    }
  } catch (const UnitError& e) {
    fail_here(e.what());
  }
  values_[spec.path] = out;
}

void ParamValues::fill_defaults() {
  // Defaults are converted once per process: sweeps load thousands of scenarios.
  static const std::map<std::string, ParamValue> converted = [] {
    std::map<std::string, ParamValue> out;
    ParamValues scratch;
    for (const auto& spec : schema_params()) {
      if (!spec.default_value) continue;
      if (spec.kind == ValueKind::text) {
        ParamValue v;
        v.spec = &spec;
        v.text = *spec.default_value;
        out[spec.path] = v;
      } else {
        scratch.convert(YAML::Load(*spec.default_value), spec, {"<schema default>"});
        out[spec.path] = scratch.values_[spec.path];
      }
    }
    return out;
  }();
  for (const auto& [path, value] : converted) {
    if (values_.count(path) || optional_section_absent(path, sections_)) continue;
    ParamValue v = value;
    v.where = where(path);
    v.from_default = true;
    values_[path] = v;
  }
}

bool ParamValues::given(const std::string& path) const {
  auto it = values_.find(path);
  return it != values_.end() && !it->second.from_default;
}

bool ParamValues::given_by_user(const std::string& path) const {
  auto it = values_.find(path);
  return it != values_.end() && !it->second.from_default && it->second.where.file.rfind("scenarios/presets/", 0) != 0;
}

bool ParamValues::has_section(const std::string& path) const { return sections_.count(path) > 0; }

const ParamValue& ParamValues::get(const std::string& path) const {
  auto it = values_.find(path);
  if (it == values_.end()) {
    if (!find_param(path)) throw std::logic_error("internal: no parameter " + path);
    fail(path, "is required");
  }
  read_.insert(path);
  return it->second;
}

std::int64_t ParamValues::integer(const std::string& path) const { return static_cast<std::int64_t>(get(path).number); }

int ParamValues::int32(const std::string& path) const {
  std::int64_t v = integer(path);
  if (v > 2'000'000'000 || v < -2'000'000'000) fail(path, "'" + get(path).text + "' is too large");
  return static_cast<int>(v);
}

double ParamValues::number(const std::string& path) const { return get(path).number; }
bool ParamValues::flag(const std::string& path) const { return get(path).flag; }
const std::string& ParamValues::text(const std::string& path) const { return get(path).text; }
Bytes ParamValues::bytes(const std::string& path) const { return Bytes(get(path).bytes); }
BytesPerSec ParamValues::bandwidth(const std::string& path) const { return BytesPerSec(get(path).number); }
Seconds ParamValues::duration(const std::string& path) const { return Seconds(get(path).number); }
FlopsPerSec ParamValues::flops_rate(const std::string& path) const { return FlopsPerSec(get(path).number); }
const std::vector<std::string>& ParamValues::items(const std::string& path) const { return get(path).items; }

SourceLocation ParamValues::where(const std::string& path) const {
  auto it = values_.find(path);
  if (it != values_.end() && !it->second.from_default) return it->second.where;
  for (std::string p = path;;) {
    auto dot = p.rfind('.');
    p = dot == std::string::npos ? "" : p.substr(0, dot);
    auto s = sections_.find(p);
    if (s != sections_.end()) return s->second;
    if (p.empty()) return document_;
  }
}

void ParamValues::fail(const std::string& path, const std::string& message) const {
  throw ScenarioError(where(path), path, message);
}

nlohmann::ordered_json ParamValues::resolved_json() const {
  nlohmann::ordered_json root = nlohmann::ordered_json::object();
  for (const auto& spec : schema_params()) {
    auto it = values_.find(spec.path);
    if (it == values_.end() || (it->second.from_default && !read_.count(spec.path))) continue;
    const ParamValue& v = it->second;
    nlohmann::ordered_json* node = &root;
    std::stringstream ss(spec.path);
    std::vector<std::string> parts;
    for (std::string part; std::getline(ss, part, '.');) parts.push_back(part);
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) node = &(*node)[parts[i]];
    nlohmann::ordered_json& leaf = (*node)[parts.back()];
    switch (spec.kind) {
      case ValueKind::integer: leaf = static_cast<std::int64_t>(v.number); break;
      case ValueKind::number: leaf = v.number; break;
      case ValueKind::boolean: leaf = v.flag; break;
      case ValueKind::choice_list: leaf = v.items; break;
      default: leaf = v.text; break;
    }
  }
  return root;
}

}  // namespace memtwin
