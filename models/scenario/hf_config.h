#pragma once
// Reads a HuggingFace transformers config.json (the file users already have next to their weights)
// and translates it into memtwin `model` keys. Supports the Llama/Mistral/Mixtral/Qwen2 family
// (model_type llama, mistral, mixtral, qwen2, qwen3, gemma), OPT and GPT-2-style configs.
#include <string>

#include <yaml-cpp/yaml.h>

#include "models/scenario/scenario_error.h"

namespace memtwin {

/// A mapping of `model` keys (layers, hidden, ...). `where` is the hf_config key's location, used
/// when the file is missing, unreadable, or lacks a field the architecture needs.
YAML::Node read_hf_config(const std::string& path, const SourceLocation& where);

}  // namespace memtwin
