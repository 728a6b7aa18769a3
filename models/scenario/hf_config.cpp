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

// The model types memtwin reads, and whether HuggingFace ties the output head to the embedding
// when a config does not say (the default of each type's config class in transformers).
struct KnownType {
  const char* name;
  bool tied_by_default;
};
constexpr KnownType kKnownTypes[] = {
    {"llama", false}, {"mistral", false}, {"mixtral", false}, {"qwen2", false}, {"qwen3", false},
    {"qwen3_moe", false}, {"gemma", true},  {"gemma2", true},   {"phi3", false}, {"falcon", true},
    {"opt", true},     {"gpt2", true},      {"gpt_neox", false}, {"gptj", false},
};

// Types memtwin knows it cannot model yet, and why: refused rather than counted wrongly.
const char* unmodelled_reason(const std::string& type) {
  if (type == "qwen2_moe") return "its shared expert (shared_expert_intermediate_size) beside the routed ones is not modelled yet";
  if (type == "deepseek_v2" || type == "deepseek_v3")
    return "multi-head latent attention (kv_lora_rank: a compressed KV cache) and shared experts are not modelled yet";
  return nullptr;
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
  std::string supported;
  const KnownType* known = nullptr;
  for (const KnownType& k : kKnownTypes) {
    supported += (supported.empty() ? "" : ", ") + std::string(k.name);
    if (type == k.name) known = &k;
  }
  if (const char* reason = unmodelled_reason(type)) {
    throw ScenarioError(where, "model.hf_config", path + ": model_type '" + type + "' cannot be modelled: " + reason);
  }
  if (!known) {
    throw ScenarioError(where, "model.hf_config",
                        path + ": model_type " + (type.empty() ? std::string("is missing") : "'" + type + "' is not one memtwin reads") +
                            "; it reads " + supported + " (or describe the architecture under model: directly)");
  }
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
  out["tied_embeddings"] = config["tie_word_embeddings"].IsDefined() ? config["tie_word_embeddings"] : YAML::Node(known->tied_by_default);
  if (type == "qwen3_moe") {
    // Every layer's MLP is its experts, each moe_intermediate_size wide (intermediate_size is the
    // width of dense layers, which a config with decoder_sparse_step 1 and no mlp_only_layers has none of).
    const YAML::Node& step = config["decoder_sparse_step"];
    const YAML::Node& dense = config["mlp_only_layers"];
    if ((step.IsDefined() && !(step.IsScalar() && step.Scalar() == "1")) || (dense.IsDefined() && dense.IsSequence() && dense.size() > 0)) {
      throw ScenarioError(where, "model.hf_config",
                          path + ": dense layers between the MoE layers (decoder_sparse_step, mlp_only_layers) are not modelled yet");
    }
    copy("intermediate", {"moe_intermediate_size"}, true);
  }
  if (type == "falcon") {
    // Falcon: multi-query attention (one KV head) unless the new decoder architecture names its KV
    // heads; a plain GELU MLP 4x the hidden size unless ffn_hidden_size says otherwise.
    const bool new_arch = config["new_decoder_architecture"].IsDefined() && config["new_decoder_architecture"].as<bool>(false);
    const bool multi_query = config["multi_query"].IsDefined() && config["multi_query"].as<bool>(false);
    if (new_arch) copy("kv_heads", {"num_kv_heads"}, true);
    else if (multi_query) out["kv_heads"] = 1;
    if (!first_of(config, {"ffn_hidden_size"})) out["intermediate"] = 4 * out["hidden"].as<long long>(0);
    else copy("intermediate", {"ffn_hidden_size"}, true);
    if (config["alibi"].IsDefined() && config["alibi"].as<bool>(false)) {
      throw ScenarioError(where, "model.hf_config", path + ": ALiBi position biases are not modelled yet");
    }
  }

  const bool gpt_style = type == "opt" || type == "gpt2" || type == "gpt_neox" || type == "gptj";
  if (gpt_style) {
    const std::string act = string_field(config, {"activation_function", "hidden_act"}, "gelu", path, where);
    out["mlp"] = act == "relu" ? "relu" : "gelu";
    out["norm"] = "layernorm";
    out["bias"] = "all";
    out["position_embedding"] = type == "opt" || type == "gpt2" ? "learned" : "rope";
  } else if (type == "falcon") {
    out["mlp"] = "gelu";
    out["norm"] = "layernorm";
    out["bias"] = config["bias"].IsDefined() && config["bias"].as<bool>(false) ? "all" : "none";
    out["position_embedding"] = "rope";
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
