#include "models/scenario/hf_config.h"

#include <filesystem>
#include <optional>

#include "models/scenario/calibration.h"
#include "models/scenario/yaml_limits.h"

namespace memtwin {
namespace {

// The first of `keys` present (and not null) in the config.
std::optional<YAML::Node> first_of(const YAML::Node& config, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    if (config[k].IsDefined() && !config[k].IsNull()) return config[k];
  }
  return std::nullopt;
}

// A JSON string field (yaml-cpp tags a quoted scalar "!"), or `fallback` when absent or null.
// Anything else (a number, a list, an object) is refused naming the field and its line.
std::string string_field(const YAML::Node& config, std::initializer_list<const char*> keys, const std::string& fallback,
                         const std::string& path, const SourceLocation& where) {
  for (const char* k : keys) {
    const YAML::Node& v = config[k];
    if (!v.IsDefined() || v.IsNull()) continue;
    if (!v.IsScalar() || v.Tag() != "!") {
      throw ScenarioError(where, "model.hf_config",
                          path + ":" + std::to_string(v.Mark().line + 1) + ": '" + k + "' must be a string");
    }
    return v.Scalar();
  }
  return fallback;
}

}  // namespace

YAML::Node read_hf_config(const std::string& path, const SourceLocation& where) {
  // Read through a const reference: a non-const lookup would insert the key.
  if (!std::filesystem::exists(path)) {
    throw ScenarioError(where, "model.hf_config", "file not found: " + path);
  }
  refuse_unreadable_yaml_file(path, where, "model.hf_config", "the HuggingFace config");
  YAML::Node loaded;
  try {
    loaded = YAML::LoadFile(path);  // JSON is a subset of YAML 1.2; yaml-cpp reads config.json as is
  } catch (const YAML::Exception& e) {
    throw ScenarioError(where, "model.hf_config",
                        path + ":" + std::to_string(e.mark.line + 1) + ": not valid JSON: " + e.msg);
  }
  const YAML::Node& config = loaded;
  if (!config.IsMap()) throw ScenarioError(where, "model.hf_config", path + " is not a JSON object");
  refuse_unbounded_or_invalid_text(config, path);
  refuse_duplicate_keys(path, config, "");

  const std::string type = string_field(config, {"model_type"}, "", path, where);
  YAML::Node out(YAML::NodeType::Map);
  auto copy = [&](const char* key, std::initializer_list<const char*> names, bool required) {
    std::optional<YAML::Node> v = first_of(config, names);
    if (v) {
      out[key] = *v;
    } else if (required) {
      throw ScenarioError(where, "model.hf_config",
                          path + " has none of the fields for '" + key + "' (" + *names.begin() + ")");
    }
  };
  copy("layers", {"num_hidden_layers", "n_layer", "num_layers"}, true);
  copy("hidden", {"hidden_size", "n_embd", "d_model"}, true);
  copy("heads", {"num_attention_heads", "n_head"}, true);
  copy("kv_heads", {"num_key_value_heads"}, false);
  copy("head_dim", {"head_dim"}, false);
  copy("intermediate", {"intermediate_size", "ffn_dim", "n_inner"}, false);
  copy("vocab", {"vocab_size"}, true);
  copy("max_position_embeddings", {"max_position_embeddings", "n_positions"}, false);
  copy("experts", {"num_local_experts", "num_experts"}, false);
  copy("experts_per_token", {"num_experts_per_tok"}, false);
  if (config["tie_word_embeddings"].IsDefined()) out["tied_embeddings"] = config["tie_word_embeddings"];

  const bool gpt_style = type == "opt" || type == "gpt2" || type == "gpt_neox" || type == "gptj";
  if (gpt_style) {
    const std::string act = string_field(config, {"activation_function", "hidden_act"}, "gelu", path, where);
    out["mlp"] = act == "relu" ? "relu" : "gelu";
    out["norm"] = "layernorm";
    out["bias"] = "all";
    out["position_embedding"] = type == "opt" || type == "gpt2" ? "learned" : "rope";
    if (!config["tie_word_embeddings"].IsDefined()) out["tied_embeddings"] = type == "opt" || type == "gpt2";
  } else {
    const std::string act = string_field(config, {"hidden_act"}, "silu", path, where);
    out["mlp"] = act.find("gelu") != std::string::npos ? "geglu" : "swiglu";
    out["norm"] = "rmsnorm";
    if (type == "qwen2" || type == "qwen2_moe") out["bias"] = "qkv";
    out["position_embedding"] = "rope";
  }
  out["source"] = path;
  return out;
}

}  // namespace memtwin
