#pragma once
// Reads a DeepSpeed config (ds_config.json, the file a DeepSpeed or HF Trainer run already has)
// into memtwin `training` keys: the ZeRO stage and its buckets, optimizer and parameter offload,
// micro and global batch, precision and optimizer. Keys the scenario sets itself win; "auto" (the
// HF Trainer fills it in at launch) leaves a key to the scenario or memtwin's default; keys that
// do not change memory or time (logging, schedulers, checkpoint saving) are ignored.
#include <string>

#include <yaml-cpp/yaml.h>

#include "models/scenario/scenario_error.h"

namespace memtwin {

/// A mapping of `training` keys (framework, sharding, offload, micro_batch, ...). `where` is the
/// deepspeed_config key's location, used when the file is missing or unreadable; a value the
/// mapping cannot take is refused at its line in the file.
YAML::Node read_deepspeed_config(const std::string& path, const SourceLocation& where);

}  // namespace memtwin
