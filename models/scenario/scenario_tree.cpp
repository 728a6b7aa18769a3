#include "models/scenario/scenario_tree.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "models/embedded.h"
#include "models/scenario/did_you_mean.h"
#include "models/scenario/deepspeed_config.h"
#include "models/scenario/hf_config.h"
#include "models/scenario/yaml_limits.h"
#include "models/schema.h"

namespace memtwin {
namespace {

// Lookups through a const node never insert the key (non-const operator[] may).
bool has_key(const YAML::Node& node, const std::string& key) { return node.IsMap() && node[key].IsDefined(); }

SourceLocation at(const std::string& file, const YAML::Mark& mark) {
  if (mark.line < 0) return {file, 0, 0};
  return {file, mark.line + 1, mark.column + 1};
}

YAML::Node parse_yaml(std::string_view text, const std::string& file) {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    throw ScenarioError(at(file, e.mark), "", "not valid YAML: " + e.msg);
  }
}

// A catalog split into its top-level entries once per process. An entry is parsed afresh for each
// scenario that uses it: linking nodes of one document into another merges their memory, so a
// shared parsed catalog would grow with every scenario loaded. Each entry's text is preceded by as
// many newlines as it had lines before it, so its marks still point at the right catalog line.
struct Catalog {
  std::string file;                                ///< the name shown in messages
  std::vector<std::string> names;                  ///< in file order
  std::map<std::string, std::string> entry_texts;  ///< name -> "<newlines>name:\n  key: ..."
};

const Catalog& catalog(std::string_view name) {
  static std::map<std::string, Catalog, std::less<>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  auto text = embedded_file(name);
  if (!text) throw std::logic_error("catalog not embedded: " + std::string(name));
  Catalog c;
  c.file = "scenarios/" + std::string(name);
  const YAML::Node whole = parse_yaml(*text, c.file);  // validates the file and gives the order
  std::vector<std::string> lines;
  std::stringstream ss{std::string(*text)};
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  for (auto entry = whole.begin(); entry != whole.end(); ++entry) {
    const std::string key = entry->first.Scalar();
    const int first = entry->first.Mark().line;
    int last = first + 1;
    while (last < static_cast<int>(lines.size()) && (lines[last].empty() || lines[last][0] == ' ' || lines[last][0] == '#')) {
      ++last;
    }
    std::string body(static_cast<std::size_t>(first), '\n');
    for (int l = first; l < last; ++l) body += lines[l] + "\n";
    c.names.push_back(key);
    c.entry_texts[key] = body;
  }
  return cache.emplace(std::string(name), std::move(c)).first->second;
}

// Copies every key of `preset` that `user` lacks into `user`, recursively for nested mappings,
// recording that those keys came from `source`.
void merge_under(YAML::Node user, const YAML::Node& preset, const std::string& path, const std::string& source,
                 std::map<std::string, std::string>& origins) {
  for (auto it = preset.begin(); it != preset.end(); ++it) {
    std::string key = it->first.as<std::string>();
    std::string child = path + "." + key;
    if (!has_key(user, key)) {
      user[key] = it->second;
      origins[child] = source;
    } else if (user[key].IsMap() && it->second.IsMap()) {
      merge_under(user[key], it->second, child, source, origins);
    }
  }
}

// `gpu: h100-sxm` -> `gpu: {preset: h100-sxm}`, for every section that allows a scalar shorthand.
void expand_shorthands(YAML::Node node, const std::string& path) {
  if (!node.IsMap()) return;
  std::vector<std::pair<std::string, YAML::Node>> entries;  // collect first: no edits while iterating
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (it->first.IsScalar()) entries.emplace_back(it->first.Scalar(), it->second);
  }
  for (auto& [key, value] : entries) {
    std::string child = path.empty() ? key : path + "." + key;
    if (value.IsScalar()) {
      if (auto inner = scalar_shorthand_key(child)) {
        YAML::Node mapping(YAML::NodeType::Map);
        mapping[*inner] = value;
        node[key] = mapping;
      }
    } else if (value.IsMap()) {
      expand_shorthands(value, child);
    }
  }
}

// An alias's value as its key takes it (schema.h: KeyAlias); a null node means the key's default.
YAML::Node translate_alias_value(const KeyAlias& a, const YAML::Node& value, const SourceLocation& where) {
  switch (a.value) {
    case KeyAlias::Value::same: return value;
    case KeyAlias::Value::negated:
      if (value.IsScalar() && (value.Scalar() == "true" || value.Scalar() == "false")) return YAML::Node(value.Scalar() == "false");
      throw ScenarioError(where, a.alias, "expected true or false (" + a.tool + ", read as " + a.key + " negated)");
    case KeyAlias::Value::kv_cache_dtype:
      if (value.IsScalar() && value.Scalar() == "auto") return YAML::Node();
      if (value.IsScalar() && (value.Scalar() == "fp8_e4m3" || value.Scalar() == "fp8_e5m2")) return YAML::Node("fp8");
      return value;  // fp8, and memtwin's own names, as written
  }
  return value;
}

// Sets `value` at the dotted `path` under `root`, making the mappings on the way; a null value
// removes the key.
void set_at(YAML::Node root, const std::vector<std::string>& parts, const YAML::Node& value) {
  YAML::Node cursor;
  cursor.reset(root);
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    if (!has_key(cursor, parts[i]) || !cursor[parts[i]].IsMap()) {
      cursor[parts[i]] = YAML::Node(YAML::NodeType::Map);
    }
    YAML::Node next = cursor[parts[i]];
    cursor.reset(next);
  }
  if (value.IsNull()) cursor.remove(parts.back());
  else cursor[parts.back()] = value;
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string part; std::getline(ss, part, '.');) parts.push_back(part);
  return parts;
}

// The scenario file's aliases (vLLM's names) read as their keys, before any override: an override
// of the key then replaces what the alias said.
// The node at `parts` under `root`, or none where a part is missing. Read only: a lookup must not
// insert. A node on the way that exists but is not a mapping ends the walk too, and is reported
// in `blocked` when asked.
std::optional<YAML::Node> find_at(const YAML::Node& root, const std::vector<std::string>& parts,
                                  std::optional<YAML::Node>* blocked = nullptr) {
  YAML::Node cursor;
  cursor.reset(root);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const YAML::Node& c = cursor;
    if (!has_key(c, parts[i])) return std::nullopt;
    YAML::Node next = c[parts[i]];
    if (i + 1 < parts.size() && !next.IsMap()) {
      if (blocked) *blocked = next;
      return std::nullopt;
    }
    cursor.reset(next);
  }
  return cursor;
}

// The scenario file's aliases (vLLM's names) read as their keys, before any override: an override
// of the key then replaces what the alias said.
void apply_aliases(ScenarioTree& tree) {
  for (const KeyAlias& a : key_aliases()) {
    std::vector<std::string> section = split_path(a.alias);
    const std::string leaf = section.back();
    section.pop_back();
    std::optional<YAML::Node> parent = find_at(tree.root, section);
    if (!parent || !parent->IsMap() || !has_key(*parent, leaf)) continue;
    const YAML::Node value = static_cast<const YAML::Node&>(*parent)[leaf];
    const SourceLocation where = tree.locate(a.alias, value.Mark());
    const std::vector<std::string> key = split_path(a.key);
    std::optional<YAML::Node> blocked;
    if (find_at(tree.root, key, &blocked)) {
      throw ScenarioError(where, a.alias, "is the " + a.tool + " for " + a.key + ", which is given too: give one");
    }
    if (blocked) {
      // Not replaced by the alias's value: the section as written is wrong, and says so.
      throw ScenarioError(tree.locate(a.key, blocked->Mark()), a.key, "the section on the way to this key is not a mapping");
    }
    const YAML::Node translated = translate_alias_value(a, value, where);
    parent->remove(leaf);
    set_at(tree.root, key, translated);
  }
}

void apply_override(YAML::Node root, const std::string& spec, std::map<std::string, std::string>& origins) {
  const std::string where = "--set " + spec;
  auto eq = spec.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ScenarioError({where}, "", "expected KEY=VALUE, e.g. --set training.micro_batch=4");
  }
  std::string path = spec.substr(0, eq);
  std::string value_text = spec.substr(eq + 1);
  if (value_text.empty()) throw ScenarioError({where}, path, "the value is empty");
  if (const std::size_t bad = first_invalid_utf8(spec); bad != std::string_view::npos) {
    throw ScenarioError({"--set"}, "", "byte " + std::to_string(bad) + " of the override is not UTF-8");
  }
  YAML::Node value;
  try {
    value = YAML::Load(value_text);
  } catch (const YAML::Exception&) {
    value = YAML::Node(value_text);  // not YAML: take the text as it is
  }
  refuse_unbounded_or_invalid_text(value, where);
  if (const KeyAlias* a = find_alias(path)) {  // another tool's name: set the key it stands for
    if (!value.IsNull()) value = translate_alias_value(*a, value, {where});
    path = a->key;
  }
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string part; std::getline(ss, part, '.');) {
    if (part.empty()) throw ScenarioError({where}, path, "empty key segment");
    parts.push_back(part);
  }
  set_at(root, parts, value);  // `--set key=null` removes the key (back to its default)
  if (!value.IsNull()) origins[path] = where;
}

void expand_presets(ScenarioTree& tree, const std::string& section, std::string_view catalog_file) {
  // Walk down to the section; it exists only if the user wrote it.
  YAML::Node node;
  node.reset(tree.root);
  std::stringstream ss(section);
  for (std::string part; std::getline(ss, part, '.');) {
    if (!has_key(node, part)) return;
    YAML::Node next = node[part];
    node.reset(next);
  }
  if (!has_key(node, "preset")) return;
  YAML::Node name_node = node["preset"];
  std::string name = name_node.IsScalar() ? name_node.Scalar() : "";
  const Catalog& cat = catalog(catalog_file);
  auto text = cat.entry_texts.find(name);
  YAML::Node entry;
  if (text != cat.entry_texts.end()) {
    const YAML::Node parsed = parse_yaml(text->second, cat.file);
    entry = parsed[name];
  }
  if (!entry.IsDefined() || !entry.IsMap()) {
    const bool model = section == "model", gpu = section == "cluster.gpu";
    std::string msg = "unknown " + std::string(model ? "model" : gpu ? "GPU" : "efficiency preset") + " '" + name + "'";
    msg += did_you_mean(name, catalog_names(catalog_file));
    if (model || gpu) {
      msg += " (list them with `memtwin " + std::string(model ? "models" : "gpus") + "`)";
    } else {
      msg += " (" + std::string(catalog_file) + " has:";
      for (const auto& known : catalog_names(catalog_file)) msg += " " + known;
      msg += ")";
    }
    throw ScenarioError(tree.locate(section + ".preset", name_node.Mark()), section + ".preset", msg);
  }
  merge_under(node, entry, section, cat.file, tree.origins);
}

void expand_hf_config(ScenarioTree& tree) {
  if (!has_key(tree.root, "model")) return;
  YAML::Node model = tree.root["model"];
  if (!has_key(model, "hf_config")) return;
  YAML::Node path_node = model["hf_config"];
  SourceLocation where = tree.locate("model.hf_config", path_node.Mark());
  if (!path_node.IsScalar()) throw ScenarioError(where, "model.hf_config", "expected a file path");
  std::filesystem::path file = path_node.Scalar();
  if (file.is_relative()) file = std::filesystem::path(tree.base_dir) / file;
  YAML::Node arch = read_hf_config(file.string(), where);
  merge_under(model, arch, "model", file.string(), tree.origins);
}

// training.deepspeed_config: the DeepSpeed config's settings beneath the scenario's own.
void expand_deepspeed_config(ScenarioTree& tree) {
  if (!has_key(tree.root, "training")) return;
  YAML::Node training = tree.root["training"];
  if (!training.IsMap() || !has_key(training, "deepspeed_config")) return;
  YAML::Node path_node = training["deepspeed_config"];
  SourceLocation where = tree.locate("training.deepspeed_config", path_node.Mark());
  if (!path_node.IsScalar()) throw ScenarioError(where, "training.deepspeed_config", "expected a file path");
  if (has_key(training, "framework") && !(training["framework"].IsScalar() && training["framework"].Scalar() == "deepspeed")) {
    const YAML::Node framework = training["framework"];
    throw ScenarioError(tree.locate("training.framework", framework.Mark()), "training.framework",
                        "is " + (framework.IsScalar() ? framework.Scalar() : std::string("not a name")) +
                            ", but training.deepspeed_config describes a DeepSpeed run: leave framework out or set it to deepspeed");
  }
  std::filesystem::path file = path_node.Scalar();
  if (file.is_relative()) file = std::filesystem::path(tree.base_dir) / file;
  merge_under(training, read_deepspeed_config(file.string(), where), "training", file.string(), tree.origins);
}

}  // namespace

SourceLocation ScenarioTree::locate(const std::string& path, const YAML::Mark& mark) const {
  // The longest recorded prefix of `path` names its source.
  for (std::string p = path;;) {
    auto it = origins.find(p);
    if (it != origins.end()) {
      if (it->second.rfind("--set", 0) == 0) return {it->second, 0, 0};
      return at(it->second, mark);
    }
    auto dot = p.rfind('.');
    if (dot == std::string::npos) break;
    p.resize(dot);
  }
  // A mapping that only an override created (`--set a.b=1` makes `a`) is located at that override.
  const auto below = origins.lower_bound(path + ".");
  if (mark.is_null() && below != origins.end() && below->first.rfind(path + ".", 0) == 0 &&
      below->second.rfind("--set", 0) == 0) {
    return {below->second, 0, 0};
  }
  return at(file, mark);
}

ScenarioTree build_scenario_tree(std::string_view text, const std::string& file, const std::string& base_dir,
                                 const std::vector<std::string>& overrides) {
  ScenarioTree tree;
  tree.file = file;
  tree.base_dir = base_dir;
  tree.root = parse_yaml(text, file);
  if (!tree.root || tree.root.IsNull()) throw ScenarioError({file, 1, 1}, "", "the scenario is empty");
  refuse_unbounded_or_invalid_text(tree.root, file);
  if (!tree.root.IsMap()) {
    throw ScenarioError(at(file, tree.root.Mark()), "", "a scenario is a mapping with name, cluster, model and training or inference");
  }
  expand_shorthands(tree.root, "");
  apply_aliases(tree);
  for (const auto& spec : overrides) {
    apply_override(tree.root, spec, tree.origins);
    // An override may set a shorthand (`cluster.gpu=h100-sxm`) that a later one refines
    // (`cluster.gpu.memory=...`): expanded before the next, it is not replaced by it.
    expand_shorthands(tree.root, "");
  }
  expand_presets(tree, "cluster.gpu", "presets/gpus.yaml");
  expand_presets(tree, "model", "presets/models.yaml");
  expand_presets(tree, "cluster.efficiency", "presets/efficiency.yaml");
  expand_hf_config(tree);
  expand_deepspeed_config(tree);
  return tree;
}

std::vector<std::string> catalog_names(std::string_view catalog_file) {
  return catalog(catalog_file).names;
}

}  // namespace memtwin
