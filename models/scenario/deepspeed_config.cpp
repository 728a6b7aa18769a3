#include "models/scenario/deepspeed_config.h"

#include <filesystem>
#include <optional>

#include "models/scenario/calibration.h"
#include "models/scenario/yaml_limits.h"

namespace memtwin {
namespace {

const char* const kKey = "training.deepspeed_config";

struct Reader {
  const std::string& path;
  const SourceLocation& where;

  [[noreturn]] void fail(const YAML::Node& at, const std::string& field, const std::string& message) const {
    throw ScenarioError(where, kKey, path + ":" + std::to_string(at.Mark().line + 1) + ": '" + field + "' " + message);
  }
  // A field's value, or nothing when it is absent, null or "auto" (the HF Trainer's placeholder).
  static std::optional<YAML::Node> value(const YAML::Node& section, const char* field) {
    if (!section.IsMap()) return std::nullopt;
    const YAML::Node v = section[field];
    if (!v.IsDefined() || v.IsNull() || (v.IsScalar() && v.Scalar() == "auto")) return std::nullopt;
    return v;
  }
  // A sub-object, or an empty node when it is absent (no field of it is then set).
  YAML::Node section(const YAML::Node& parent, const char* field) const {
    if (!parent.IsMap()) return {};
    const YAML::Node v = parent[field];
    if (!v.IsDefined() || v.IsNull()) return {};
    if (!v.IsMap()) fail(v, field, "must be an object");
    return v;
  }
  bool flag(const YAML::Node& v, const std::string& field) const {
    if (!v.IsScalar() || (v.Scalar() != "true" && v.Scalar() != "false")) fail(v, field, "must be true or false");
    return v.Scalar() == "true";
  }
  std::string device(const YAML::Node& v, const std::string& field) const {
    if (!v.IsScalar() || (v.Scalar() != "none" && v.Scalar() != "cpu" && v.Scalar() != "nvme")) {
      fail(v, field, "must be none, cpu or nvme");
    }
    return v.Scalar();
  }
};

}  // namespace

YAML::Node read_deepspeed_config(const std::string& path, const SourceLocation& where) {
  if (!std::filesystem::exists(path)) throw ScenarioError(where, kKey, "file not found: " + path);
  refuse_unreadable_yaml_file(path, where, kKey, "the DeepSpeed config");
  YAML::Node loaded;
  try {
    loaded = YAML::LoadFile(path);  // JSON is a subset of YAML 1.2: yaml-cpp keeps each value's line
  } catch (const YAML::Exception& e) {
    throw ScenarioError(where, kKey, path + ":" + std::to_string(e.mark.line + 1) + ": not valid JSON: " + e.msg);
  }
  const YAML::Node& config = loaded;  // const: a lookup must not insert the key
  if (!config.IsMap()) throw ScenarioError(where, kKey, path + " is not a JSON object");
  refuse_unbounded_or_invalid_text(config, path);
  refuse_duplicate_keys(path, config, "");
  const Reader r{path, where};

  YAML::Node out(YAML::NodeType::Map);
  out["framework"] = "deepspeed";
  if (auto v = Reader::value(config, "train_micro_batch_size_per_gpu")) out["micro_batch"] = *v;
  if (auto v = Reader::value(config, "train_batch_size")) {
    out["global_batch"] = *v;
  } else if (Reader::value(config, "gradient_accumulation_steps")) {
    // DeepSpeed derives the global batch from the data-parallel size, which the scenario's
    // cluster and parallelism decide; memtwin takes the global batch and derives the steps.
    r.fail(config["gradient_accumulation_steps"], "gradient_accumulation_steps",
           "without train_batch_size: give train_batch_size (micro batch x accumulation steps x data-parallel ranks), "
           "or training.global_batch in the scenario");
  }

  // Precision: DeepSpeed trains in fp32 unless bf16 or fp16 is enabled.
  const YAML::Node bf16 = r.section(config, "bf16");
  const YAML::Node fp16 = r.section(config, "fp16");
  const auto bf16_on = Reader::value(bf16, "enabled"), fp16_on = Reader::value(fp16, "enabled");
  const bool bf16_enabled = bf16_on && r.flag(*bf16_on, "bf16.enabled");
  const bool fp16_enabled = fp16_on && r.flag(*fp16_on, "fp16.enabled");
  if (bf16_enabled && fp16_enabled) r.fail(*fp16_on, "fp16.enabled", "and bf16.enabled cannot both be true");
  const bool precision_auto = (bf16.IsMap() && !bf16_on) || (fp16.IsMap() && !fp16_on);
  if (bf16_enabled) out["precision"] = "bf16";
  else if (fp16_enabled) out["precision"] = "fp16";
  else if (!precision_auto) out["precision"] = "fp32";

  const YAML::Node optimizer = r.section(config, "optimizer");
  if (auto type = Reader::value(optimizer, "type")) {
    const std::string t = type->IsScalar() ? type->Scalar() : "";
    if (t == "Adam" || t == "FusedAdam" || t == "DeepSpeedCPUAdam" || t == "OneBitAdam") out["optimizer"] = "adam";
    else if (t == "AdamW") out["optimizer"] = "adamw";
    else r.fail(*type, "optimizer.type", "'" + t + "' is not modelled (Adam, AdamW, FusedAdam, DeepSpeedCPUAdam, OneBitAdam are)");
  }

  const YAML::Node zero = r.section(config, "zero_optimization");
  if (auto stage = Reader::value(zero, "stage")) {
    if (!stage->IsScalar() || (stage->Scalar() != "0" && stage->Scalar() != "1" && stage->Scalar() != "2" && stage->Scalar() != "3")) {
      r.fail(*stage, "zero_optimization.stage", "must be 0, 1, 2 or 3");
    }
    if (stage->Scalar() == "0") {
      out["sharding"]["strategy"] = "ddp";
    } else {
      out["sharding"]["strategy"] = "zero";
      out["sharding"]["stage"] = *stage;
    }
  }
  // DeepSpeed's bucket and threshold names and memtwin's.
  const std::pair<const char*, const char*> buckets[] = {
      {"reduce_bucket_size", "reduce_bucket_size"},
      {"allgather_bucket_size", "allgather_bucket_size"},
      {"stage3_prefetch_bucket_size", "prefetch_bucket_size"},
      {"stage3_param_persistence_threshold", "param_persistence_threshold"},
      {"stage3_max_live_parameters", "max_live_parameters"},
      {"sub_group_size", "sub_group_size"},
  };
  for (const auto& [theirs, ours] : buckets) {
    if (auto v = Reader::value(zero, theirs)) out["sharding"][ours] = *v;
  }
  const YAML::Node offload_optimizer = r.section(zero, "offload_optimizer");
  if (auto d = Reader::value(offload_optimizer, "device")) {
    out["offload"]["optimizer"] = r.device(*d, "zero_optimization.offload_optimizer.device");
  }
  if (auto pin = Reader::value(offload_optimizer, "pin_memory")) {
    out["offload"]["pin_memory"] = r.flag(*pin, "zero_optimization.offload_optimizer.pin_memory");
  }
  const YAML::Node offload_param = r.section(zero, "offload_param");
  if (auto d = Reader::value(offload_param, "device")) {
    out["offload"]["parameters"] = r.device(*d, "zero_optimization.offload_param.device");
  }
  return out;
}

}  // namespace memtwin
