#include "models/schema.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "models/enums.h"
#include "models/kv/kv_method.h"
#include "models/scenario.h"
#include "models/schema_table.h"

namespace memtwin {
namespace {

using namespace schema_detail;

void declare_top(Table& t) {
  t.add("name", K::text, none, "scenario name, used in outputs (required)");
  t.add("description", K::text, "", "free text");
  t.add("seed", K::integer, "1", "every random draw derives from it").at_least(0);
  t.add("simulation.fidelity", K::choice, "auto",
        "full: simulate every rank; fast: two nodes of each pipeline stage stand for all of them; auto: fast where it "
        "gives what full gives (every communicator inside one node or over all of its stage's nodes), else full; "
        "the result says which ran and why")
      .choices(names(kFidelityNames));
  t.add("simulation.time_limit", K::duration, "10min",
        "refuse a simulation estimated to take longer on the reference machine (the estimate is printed)")
      .above(0);
}

void declare_model(Table& t) {
  t.add("model.preset", K::preset, none, "model catalog name (`memtwin models`); `model: NAME` is short for this");
  t.add("model.hf_config", K::path, none, "a HuggingFace config.json to read the architecture from");
  t.add("model.parameters", K::number, none, "parameter count alone: model-state estimates only").above(0);
  t.add("model.layers", K::integer, none, "transformer blocks").at_least(1);
  t.add("model.hidden", K::integer, none, "hidden size").at_least(1);
  t.add("model.heads", K::integer, none, "attention (query) heads").at_least(1);
  t.add("model.kv_heads", K::integer, none, "key/value heads (GQA/MQA)").at_least(1).derived("heads");
  t.add("model.head_dim", K::integer, none, "size of one head").at_least(1).derived("hidden / heads");
  t.add("model.intermediate", K::integer, none, "MLP inner size (per expert)").at_least(1)
      .derived("4 x hidden for gelu/relu; required for gated MLPs");
  t.add("model.vocab", K::integer, none, "vocabulary size").at_least(1);
  t.add("model.mlp", K::choice, "swiglu", "MLP type (gated ones have three matrices)").choices(names(kMlpNames));
  t.add("model.tied_embeddings", K::boolean, "false", "input embedding shared with the output head");
  t.add("model.experts", K::integer, "1", "MoE experts per layer (1 = dense)").at_least(1);
  t.add("model.experts_per_token", K::integer, "1", "MoE experts each token is routed to (top-k)").at_least(1);
  t.add("model.norm", K::choice, "rmsnorm", "normalisation layer").choices(names(kNormNames));
  t.add("model.bias", K::choice, "none", "which linear layers carry biases").choices(names(kBiasNames));
  t.add("model.position_embedding", K::choice, "rope", "position encoding").choices(names(kPositionNames));
  t.add("model.max_position_embeddings", K::integer, none, "longest context the model was trained for").at_least(1);
  t.add("model.dropout", K::boolean, "false", "dropout during training (stores 1-byte masks, as in GPT-3 and OPT)");
  t.add("model.source", K::text, "", "where the architecture comes from");
}

void declare_training(Table& t) {
  t.add("training.framework", K::choice, "ideal",
        "whose memory conventions to follow (ideal = the ZeRO paper's accounting)").choices(names(kFrameworkNames));
  t.add("training.deepspeed_config", K::path, none,
        "a DeepSpeed config (ds_config.json) to read the ZeRO stage, buckets, offload, batch sizes, precision and optimizer from; "
        "the scenario's own keys win, \"auto\" values are left to them");
  t.add("training.global_batch", K::integer, none, "sequences per optimizer step").at_least(1)
      .derived("micro_batch x data-parallel size (no accumulation)");
  t.add("training.micro_batch", K::integer, "1", "sequences per micro-batch per GPU").at_least(1);
  t.add("training.seq_len", K::integer, "2048", "tokens per sequence").at_least(1);
  t.add("training.target_tokens", K::number, none,
        "tokens to train on (for planning: the result gives the days to reach them)").above(0);
  t.add("training.precision", K::choice, "bf16", "compute precision (16-bit and fp8 keep fp32 master weights)")
      .choices(names(kPrecisionNames));
  t.add("training.optimizer", K::choice, "adamw", "optimizer").choices(names(kOptimizerNames));
  t.add("training.parallelism.tensor", K::integer, "1", "tensor-parallel size").at_least(1);
  t.add("training.parallelism.sequence_parallel", K::boolean, "false", "Megatron sequence parallelism (needs tensor > 1)");
  t.add("training.parallelism.pipeline", K::integer, "1", "pipeline stages").at_least(1);
  t.add("training.parallelism.pipeline_schedule", K::choice, "1f1b", "pipeline schedule")
      .choices(names(kPipelineScheduleNames));
  t.add("training.parallelism.interleave", K::integer, "1", "model chunks per stage (interleaved schedule)").at_least(1);
  t.add("training.parallelism.expert", K::integer, "1", "expert-parallel size (MoE)").at_least(1);
  t.add("training.parallelism.context", K::integer, "1",
        "context-parallel size: ranks splitting each sequence (keys and values all-gathered per layer)")
      .at_least(1);
  t.add("training.sharding.strategy", K::choice, "ddp", "data-parallel sharding").choices(names(kShardingStrategyNames));
  t.add("training.sharding.stage", K::integer, none, "ZeRO stage (strategy zero; required there)").at_least(0).at_most(3);
  t.add("training.sharding.mode", K::choice, "full_shard", "FSDP sharding mode (strategy fsdp)").choices(names(kFsdpModeNames));
  t.add("training.sharding.shard_group", K::integer, none, "GPUs per shard group (hybrid_shard)").at_least(1)
      .derived("gpus_per_node");
  t.add("training.sharding.wrap", K::choice, "transformer_block", "FSDP unit (strategy fsdp)").choices(names(kFsdpWrapNames));
  t.add("training.sharding.limit_all_gathers", K::boolean, "true", "FSDP: at most two all-gathers in flight");
  t.add("training.sharding.ddp_bucket", K::bytes, "25MiB", "DDP gradient bucket (PyTorch bucket_cap_mb)").above(0);
  t.add("training.sharding.reduce_bucket_size", K::number, "5e8", "DeepSpeed reduce bucket, elements").above(0);
  t.add("training.sharding.allgather_bucket_size", K::number, "5e8", "DeepSpeed all-gather bucket, elements").above(0);
  t.add("training.sharding.prefetch_bucket_size", K::number, "5e7", "DeepSpeed stage3_prefetch_bucket_size, elements").above(0);
  t.add("training.sharding.param_persistence_threshold", K::number, "1e5",
        "DeepSpeed stage3_param_persistence_threshold, elements").at_least(0);
  t.add("training.sharding.max_live_parameters", K::number, "1e9", "DeepSpeed stage3_max_live_parameters, elements").above(0);
  t.add("training.sharding.sub_group_size", K::number, "1e9", "DeepSpeed sub_group_size, elements").above(0);
  t.add("training.offload.optimizer", K::choice, "none", "where optimizer states live").choices(names(kOffloadNames));
  t.add("training.offload.parameters", K::choice, "none", "where parameters live between uses (ZeRO-3 / FSDP)")
      .choices(names(kOffloadNames));
  t.add("training.offload.pin_memory", K::boolean, "true", "offloaded states in pinned host memory");
  t.add("training.activation_checkpointing", K::choice, "none", "activation recomputation").choices(names(kRecomputeNames));
  t.add("training.attention", K::choice, "flash", "attention kernel (explicit materialises the scores)")
      .choices(names(kAttentionNames));
  t.add("training.fine_tuning.method", K::choice, "full", "full training, LoRA or QLoRA (4-bit NF4 base)")
      .choices(names(kFineTuningNames));
  t.add("training.fine_tuning.lora_rank", K::integer, "16", "LoRA rank r").at_least(1);
  t.add("training.fine_tuning.lora_targets", K::choice_list, "[q_proj, v_proj]", "modules that get LoRA adapters")
      .choices(names(kLoraTargetNames));
  t.add("training.fine_tuning.double_quant", K::boolean, "true", "QLoRA double quantisation of the NF4 scales");
}

void declare_length(Table& t, const std::string& prefix, const std::string& what) {
  t.add(prefix + ".dist", K::choice, "fixed", what + " length distribution").choices(names(kLengthDistNames));
  t.add(prefix + ".value", K::number, none, "fixed length (`" + what + "_tokens: N` is short for this)").at_least(1);
  t.add(prefix + ".mean", K::number, none, "mean (normal, lognormal)").above(0);
  t.add(prefix + ".std", K::number, none, "standard deviation (normal, lognormal)").at_least(0);
  t.add(prefix + ".min", K::number, "1", "lower bound (uniform; clamp for others)").at_least(1);
  t.add(prefix + ".max", K::number, none, "upper bound (uniform; clamp for others)").at_least(1);
  t.add(prefix + ".file", K::path, none, "empirical: a file with one length per line");
}

void declare_inference(Table& t) {
  t.add("inference.engine", K::choice, "vllm", "whose capacity and scheduling rules to follow").choices(names(kEngineNames));
  t.add("inference.serving.replicas", K::integer, "1", "data-parallel engine replicas").at_least(1);
  t.add("inference.serving.tensor_parallel", K::integer, "1", "GPUs per replica in tensor parallel").at_least(1);
  t.add("inference.serving.pipeline_parallel", K::integer, "1", "pipeline stages per replica").at_least(1);
  t.add("inference.serving.expert_parallel", K::boolean, "false",
        "MoE: spread the experts whole over all replicas' GPUs, which step together (vLLM enable_expert_parallel)");
  t.add("inference.serving.max_num_seqs", K::integer, "256", "sequences per iteration").at_least(1);
  t.add("inference.serving.max_num_batched_tokens", K::integer, "8192", "tokens per iteration").at_least(1);
  t.add("inference.serving.max_model_len", K::integer, none, "longest prompt + output").at_least(1)
      .derived("the model's max_position_embeddings");
  t.add("inference.serving.block_size", K::integer, "16", "tokens per KV block").at_least(1);
  t.add("inference.serving.gpu_memory_utilization", K::number, "0.9", "fraction of GPU memory the engine may use")
      .above(0).at_most(1);
  t.add("inference.serving.chunked_prefill", K::boolean, "true", "split long prompts across iterations");
  t.add("inference.serving.prefix_caching", K::boolean, "false",
        "share the KV blocks of cached prompt prefixes (vLLM automatic prefix caching; uncompressed or group-quantised caches)");
  t.add("inference.serving.preemption", K::choice, "recompute", "what happens to a preempted sequence's KV")
      .choices(names(kPreemptionNames));
  t.add("inference.serving.cuda_graphs", K::boolean, "true", "capture decode in CUDA graphs (costs a memory pool)");
  t.add("inference.serving.swap_space", K::bytes, "4GiB", "host memory per GPU for swapped KV (vLLM swap_space)").at_least(0);
  t.add("inference.serving.router", K::choice, "round_robin", "how requests are spread over replicas")
      .choices(names(kRouterNames));
  for (const char* side : {"prefill", "decode"}) {
    const std::string key = std::string("inference.disaggregation.") + side;
    t.add(key + ".replicas", K::integer, "1", std::string(side) + " instances (disaggregated serving)").at_least(1);
    t.add(key + ".tensor_parallel", K::integer, "1", std::string("GPUs per ") + side + " instance in tensor parallel").at_least(1);
    t.add(key + ".gpu", K::text, none,
          std::string("GPU catalog name (`memtwin gpus`) of the ") + side +
              " instances when it is not cluster.gpu: their nodes are of that type (memory, FLOPs, bandwidth, NVLink, "
              "price); cluster.gpu's calibration does not apply to them");
  }
  t.add("inference.disaggregation.layerwise_transfer", K::boolean, "false",
        "stream each layer's KV to the decode instance while the prompt is prefilled (layer-wise KV connectors, as "
        "Mooncake's and vLLM's), the decode instance chosen when the prefill starts; false: the whole KV cache "
        "crosses after the prefill");
  t.add("inference.weights.dtype", K::choice, "bf16", "weight format").choices(names(kWeightDtypeNames));
  t.add("inference.weights.group_size", K::integer, "128", "quantisation group (awq_int4)").at_least(1);
  t.add("inference.kv_cache.dtype", K::choice, "bf16", "KV element type before compression").choices(names(kKvDtypeNames));
  t.add("inference.kv_cache.memory", K::bytes, none, "explicit KV pool per GPU instead of the engine's rule").above(0);
  t.add("inference.kv_cache.quality", K::path, none,
        "a `memtwin quality --json` document: the result carries this KV method's measured quality");
  t.add("inference.kv_cache.compression.method", K::choice, "none", "KV compression").choices(names(kKvCompressionNames));
  for (ParamSpec& p : kv_compression_schema()) t.add(std::move(p));  // each method's parameters
  t.add("inference.tiers.host_memory", K::bytes, none, "host DRAM per node for spilled KV").above(0);
  t.add("inference.tiers.nvme", K::bytes, none, "NVMe per node for spilled KV").above(0);
  t.add("inference.tiers.policy", K::choice, "lru", "which KV leaves a tier first").choices(names(kTierPolicyNames));
  t.add("inference.tiers.proactive_offload", K::boolean, "false",
        "copy a cached prefix to host memory in the background as soon as no request uses it, so that evicting it "
        "from the GPU later moves nothing while requests wait");
  t.add("inference.workload.arrival", K::choice, "poisson", "arrival process").choices(names(kArrivalNames));
  t.add("inference.workload.rate", K::rate, none,
        "mean arrival rate (open-loop arrivals); with a trace, the mean rate it is replayed at (its arrival times scaled)")
      .above(0);
  t.add("inference.workload.cv", K::number, "2", "gamma: coefficient of variation of inter-arrival times").above(0);
  t.add("inference.workload.concurrency", K::integer, none, "closed_loop: requests in flight").at_least(1);
  t.add("inference.workload.requests", K::integer, "1000", "requests to simulate (at most 10 M, as a trace)")
      .at_least(1).at_most(1e7);
  declare_length(t, "inference.workload.prompt_tokens", "prompt");
  declare_length(t, "inference.workload.output_tokens", "output");
  t.add("inference.workload.trace", K::path, none, "CSV trace; replaces arrival, rate, requests and lengths");
  t.add("inference.workload.lengths", K::path, none,
        "CSV of (prompt, output) token pairs (a trace's or a dataset's), one row drawn per request so that the two "
        "stay correlated; replaces prompt_tokens and output_tokens");
  t.add("inference.workload.shared_prefix.groups", K::integer, "0",
        "groups of requests sharing a prefix; each request joins one at random").at_least(0);
  t.add("inference.workload.shared_prefix.tokens", K::integer, "0",
        "length of each group's prefix, placed before the request's own drawn prompt").at_least(0);
  t.add("inference.slo.ttft_p99", K::duration, none, "target p99 time to first token").above(0);
  t.add("inference.slo.tpot_p99", K::duration, none, "target p99 time per output token").above(0);
  t.add("inference.slo.e2e_p99", K::duration, none, "target p99 end-to-end latency").above(0);
}

std::vector<ParamSpec> build_schema() {
  Table t;
  declare_top(t);
  declare_cluster(t);
  declare_model(t);
  declare_training(t);
  declare_inference(t);
  return t.take();
}

std::string parent_of(std::string_view path) {
  auto dot = path.rfind('.');
  return dot == std::string_view::npos ? std::string() : std::string(path.substr(0, dot));
}

std::string leaf_of(std::string_view path) {
  auto dot = path.rfind('.');
  return std::string(dot == std::string_view::npos ? path : path.substr(dot + 1));
}

std::string describe_default(const ParamSpec& p) {
  if (p.default_value) return p.default_value->empty() ? "\"\"" : *p.default_value;
  if (!p.default_note.empty()) return p.default_note;
  return p.path == "name" ? "required" : "none";
}

std::string describe_type(const ParamSpec& p) {
  std::string out(kind_name(p.kind));
  if (!p.choices.empty()) {
    out += ": ";
    for (std::size_t i = 0; i < p.choices.size(); ++i) out += (i ? " | " : "") + p.choices[i];
  }
  if (p.min || p.max) {
    std::ostringstream range;
    if (p.min) range << (p.min_exclusive ? " > " : " >= ") << *p.min;
    if (p.max) range << (p.min ? "," : "") << " <= " << *p.max;
    out += range.str();
  }
  return out;
}

}  // namespace

std::string_view kind_name(ValueKind kind) {
  switch (kind) {
    case ValueKind::integer: return "integer";
    case ValueKind::number: return "number";
    case ValueKind::boolean: return "boolean";
    case ValueKind::text: return "text";
    case ValueKind::choice: return "choice";
    case ValueKind::choice_list: return "list of";
    case ValueKind::bytes: return "size (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)";
    case ValueKind::bandwidth: return "bandwidth (GB/s, TB/s, GiB/s, Gbps)";
    case ValueKind::duration: return "duration (ns, us, ms, s, min, h)";
    case ValueKind::flops_rate: return "compute rate (GFLOPS, TFLOPS, PFLOPS)";
    case ValueKind::rate: return "rate (N/s, N/min, N/h)";
    case ValueKind::path: return "path";
    case ValueKind::preset: return "catalog name";
  }
  return "?";
}

const std::vector<ParamSpec>& schema_params() {
  static const std::vector<ParamSpec> params = build_schema();
  return params;
}

const ParamSpec* find_param(std::string_view path) {
  static const std::map<std::string, const ParamSpec*, std::less<>> index = [] {
    std::map<std::string, const ParamSpec*, std::less<>> m;
    for (const auto& p : schema_params()) m[p.path] = &p;
    return m;
  }();
  auto it = index.find(path);
  return it == index.end() ? nullptr : it->second;
}

bool is_section(std::string_view path) {
  if (path.empty()) return true;
  std::string prefix = std::string(path) + ".";
  return std::any_of(schema_params().begin(), schema_params().end(),
                     [&](const ParamSpec& p) { return p.path.rfind(prefix, 0) == 0; });
}

std::vector<std::string> section_keys(std::string_view section) {
  std::vector<std::string> keys;
  std::string prefix = section.empty() ? "" : std::string(section) + ".";
  for (const auto& p : schema_params()) {
    if (p.path.rfind(prefix, 0) != 0) continue;
    std::string rest = p.path.substr(prefix.size());
    std::string key = rest.substr(0, rest.find('.'));
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  }
  return keys;
}

std::optional<std::string> scalar_shorthand_key(std::string_view section) {
  if (section == "cluster.gpu" || section == "model" || section == "cluster.efficiency") return "preset";
  if (section == "inference.workload.prompt_tokens" || section == "inference.workload.output_tokens") return "value";
  if (section == "training.fine_tuning") return "method";  // fine_tuning: lora
  return std::nullopt;
}

const std::vector<KeyAlias>& key_aliases() {
  // vLLM's engine arguments (vllm/engine/arg_utils.py, EngineArgs), under inference.serving where
  // a vLLM command line's flags would be pasted.
  static const std::vector<KeyAlias> aliases = [] {
    using V = KeyAlias::Value;
    const std::string vllm = "vLLM engine argument";
    const std::string s = "inference.serving.";
    return std::vector<KeyAlias>{
        {s + "tensor_parallel_size", s + "tensor_parallel", V::same, vllm},
        {s + "pipeline_parallel_size", s + "pipeline_parallel", V::same, vllm},
        {s + "data_parallel_size", s + "replicas", V::same, vllm},
        {s + "enable_expert_parallel", s + "expert_parallel", V::same, vllm},
        {s + "enable_chunked_prefill", s + "chunked_prefill", V::same, vllm},
        {s + "enable_prefix_caching", s + "prefix_caching", V::same, vllm},
        {s + "enforce_eager", s + "cuda_graphs", V::negated, vllm},
        {s + "preemption_mode", s + "preemption", V::same, vllm},
        {s + "kv_cache_dtype", "inference.kv_cache.dtype", V::kv_cache_dtype, vllm},
    };
  }();
  return aliases;
}

const KeyAlias* find_alias(std::string_view path) {
  for (const KeyAlias& a : key_aliases())
    if (a.alias == path) return &a;
  return nullptr;
}

std::string schema_markdown() {
  std::ostringstream out;
  out << "# Scenario reference\n\n"
      << "Generated by `memtwin schema --markdown`; a test keeps this file in sync with the code.\n"
      << "Values with units are strings with a suffix (`80GiB`, `450GB/s`, `2us`, `989TFLOPS`,\n"
      << "`400Gbps`, `10/s`); plain numbers are counts. A scenario has `cluster`, `model` and exactly\n"
      << "one of `training` or `inference`, or `cluster` and a `jobs:` list of training and serving scenario files\n"
      << "placed on it (docs/shared-clusters.md). Unknown keys are errors.\n";
  std::string current_section = "\x01";
  for (const auto& p : schema_params()) {
    std::string section = parent_of(p.path);
    if (section != current_section) {
      current_section = section;
      out << "\n## " << (section.empty() ? "top level" : "`" + section + "`") << "\n\n"
          << "| key | type | default | description |\n|---|---|---|---|\n";
    }
    out << "| `" << leaf_of(p.path) << "` | " << describe_type(p) << " | " << describe_default(p) << " | "
        << p.doc << " |\n";
  }
  out << "\n## Other tools' names\n\n"
      << "Read as the key they stand for; an alias and its key given together are refused.\n\n"
      << "| written | read as | whose name |\n|---|---|---|\n";
  for (const KeyAlias& a : key_aliases()) {
    const char* how = a.value == KeyAlias::Value::negated          ? " (negated)"
                      : a.value == KeyAlias::Value::kv_cache_dtype ? " (auto: the default; fp8, fp8_e4m3, fp8_e5m2: fp8)"
                                                                   : "";
    out << "| `" << a.alias << "` | `" << a.key << "`" << how << " | " << a.tool << " |\n";
  }
  return out.str();
}

std::string schema_text() {
  std::ostringstream out;
  for (const auto& p : schema_params()) {
    out << p.path << "  (" << describe_type(p) << "; default: " << describe_default(p) << ")\n    "
        << p.doc << "\n";
  }
  return out.str();
}

}  // namespace memtwin
