#include "models/scenario/builders.h"

#include <string>

namespace memtwin {
namespace {

std::string str(long long n) { return std::to_string(n); }

Parallelism build_parallelism(const ParamValues& v, const Cluster& cluster, const ModelSpec& model) {
  Parallelism p;
  p.tensor = v.int32("training.parallelism.tensor");
  p.sequence_parallel = v.flag("training.parallelism.sequence_parallel");
  p.pipeline = v.int32("training.parallelism.pipeline");
  p.schedule = v.choice("training.parallelism.pipeline_schedule", kPipelineScheduleNames);
  p.interleave = v.int32("training.parallelism.interleave");
  p.expert = v.int32("training.parallelism.expert");
  p.context = v.int32("training.parallelism.context");
  const int gpus = cluster.total_gpus();

  if (p.sequence_parallel && p.tensor == 1) {
    v.fail("training.parallelism.sequence_parallel", "needs tensor parallelism (tensor > 1)");
  }
  if (gpus % (p.tensor * p.pipeline) != 0) {
    v.fail("training.parallelism.tensor", str(gpus) + " GPUs cannot be split into tensor " + str(p.tensor) + " x pipeline " +
                                       str(p.pipeline) + " groups (" + str(gpus) + " is not a multiple of " +
                                       str(p.tensor * p.pipeline) + ")");
  }
  if (p.schedule == PipelineSchedule::interleaved) {
    if (p.pipeline == 1) v.fail("training.parallelism.pipeline_schedule", "interleaved needs pipeline > 1");
    if (p.interleave < 2) v.fail("training.parallelism.interleave", "the interleaved schedule needs interleave >= 2");
  } else if (p.interleave != 1) {
    v.fail("training.parallelism.interleave", "is only meaningful with pipeline_schedule: interleaved");
  }
  if (model.architecture_known) {
    if (model.heads % p.tensor != 0) {
      v.fail("training.parallelism.tensor", "tensor parallel " + str(p.tensor) + " does not divide the model's " +
                                                str(model.heads) + " attention heads");
    }
    if (p.tensor > model.kv_heads && p.tensor % model.kv_heads != 0) {
      v.fail("training.parallelism.tensor", "tensor parallel " + str(p.tensor) + " can neither split nor replicate " +
                                                str(model.kv_heads) + " key/value heads");
    }
    // Uneven splits are allowed (Megatron and Llama 3 trim the first and last stages); the
    // memory model takes the heaviest stage. Fewer layers than chunks cannot work.
    const int chunks = p.pipeline * p.interleave;
    if (model.layers < chunks) {
      v.fail("training.parallelism.pipeline", str(model.layers) + " layers cannot fill " + str(chunks) +
                                                  " pipeline chunks (pipeline x interleave)");
    }
    if (p.expert > 1) {
      if (model.experts == 1) v.fail("training.parallelism.expert", "the model has no experts (a dense model)");
      if (model.experts % p.expert != 0) {
        v.fail("training.parallelism.expert", "expert parallel " + str(p.expert) + " does not divide " +
                                                  str(model.experts) + " experts");
      }
    }
  }
  const int dp = gpus / (p.tensor * p.pipeline);
  if (dp % p.context != 0) {
    v.fail("training.parallelism.context", str(gpus) + " GPUs cannot be split into tensor " + str(p.tensor) + " x context " +
                                               str(p.context) + " x pipeline " + str(p.pipeline) + " groups (" + str(gpus) +
                                               " is not a multiple of " + str(p.tensor * p.context * p.pipeline) + ")");
  }
  if (p.context > 1 && p.expert > 1) {
    v.fail("training.parallelism.context", "context parallelism together with expert parallelism is not modelled yet");
  }
  if (dp % p.expert != 0) {
    v.fail("training.parallelism.expert", "expert parallel " + str(p.expert) + " does not divide the data-parallel size " +
                                              str(dp));
  }
  return p;
}

Sharding build_sharding(const ParamValues& v, int dp, const Cluster& cluster) {
  Sharding s;
  s.strategy = v.choice("training.sharding.strategy", kShardingStrategyNames);
  const std::string strategy(kShardingStrategyNames.name(s.strategy));
  if (s.strategy == ShardingStrategy::zero) {
    if (!v.given("training.sharding.stage")) v.fail("training.sharding.stage", "is required with strategy: zero (0, 1, 2 or 3)");
    s.zero_stage = v.int32("training.sharding.stage");
  } else if (v.given("training.sharding.stage")) {
    v.fail("training.sharding.stage", "is only meaningful with strategy: zero (strategy is " + strategy + ")");
  }
  for (const char* key : {"training.sharding.mode", "training.sharding.wrap", "training.sharding.limit_all_gathers"}) {
    if (s.strategy != ShardingStrategy::fsdp && v.given(key)) {
      v.fail(key, "is only meaningful with strategy: fsdp (strategy is " + strategy + ")");
    }
  }
  if (s.strategy == ShardingStrategy::fsdp) {
    s.fsdp_mode = v.choice("training.sharding.mode", kFsdpModeNames);
    s.wrap = v.choice("training.sharding.wrap", kFsdpWrapNames);
    s.limit_all_gathers = v.flag("training.sharding.limit_all_gathers");
  }
  const bool hybrid = s.strategy == ShardingStrategy::fsdp && s.fsdp_mode == FsdpMode::hybrid_shard;
  if (v.given("training.sharding.shard_group") && !hybrid) {
    v.fail("training.sharding.shard_group", "is only meaningful with strategy: fsdp, mode: hybrid_shard");
  }
  if (hybrid) {
    s.shard_group = v.given("training.sharding.shard_group") ? v.int32("training.sharding.shard_group")
                                                             : std::min(cluster.gpus_per_node, dp);
    if (s.shard_group > dp || dp % s.shard_group != 0) {
      v.fail("training.sharding.shard_group", "shard group " + str(s.shard_group) +
                                                  " does not divide the data-parallel size " + str(dp));
    }
  }
  if (v.given("training.sharding.ddp_bucket") && s.strategy != ShardingStrategy::ddp) {
    v.fail("training.sharding.ddp_bucket", "is only meaningful with strategy: ddp (strategy is " + strategy + ")");
  }
  if (s.strategy == ShardingStrategy::ddp) s.ddp_bucket = v.bytes("training.sharding.ddp_bucket");
  const std::string ds = "training.sharding.";
  for (const char* key : {"reduce_bucket_size", "allgather_bucket_size", "prefetch_bucket_size",
                          "param_persistence_threshold", "max_live_parameters", "sub_group_size"}) {
    if (v.given(ds + key) && s.strategy != ShardingStrategy::zero) {
      v.fail(ds + key, "is a DeepSpeed ZeRO knob: only meaningful with strategy: zero (strategy is " + strategy + ")");
    }
  }
  if (s.strategy == ShardingStrategy::zero) {
    s.deepspeed.reduce_bucket_size = v.number(ds + "reduce_bucket_size");
    s.deepspeed.allgather_bucket_size = v.number(ds + "allgather_bucket_size");
    s.deepspeed.prefetch_bucket_size = v.number(ds + "prefetch_bucket_size");
    s.deepspeed.param_persistence_threshold = v.number(ds + "param_persistence_threshold");
    s.deepspeed.max_live_parameters = v.number(ds + "max_live_parameters");
    s.deepspeed.sub_group_size = v.number(ds + "sub_group_size");
  }
  return s;
}

bool shards_parameters(const Sharding& s) {
  return (s.strategy == ShardingStrategy::zero && s.zero_stage == 3) ||
         (s.strategy == ShardingStrategy::fsdp &&
          (s.fsdp_mode == FsdpMode::full_shard || s.fsdp_mode == FsdpMode::hybrid_shard));
}

Offload build_offload(const ParamValues& v, const Sharding& s, const Cluster& cluster) {
  Offload o;
  o.optimizer = v.choice("training.offload.optimizer", kOffloadNames);
  o.parameters = v.choice("training.offload.parameters", kOffloadNames);
  o.pin_memory = v.flag("training.offload.pin_memory");
  if (o.optimizer != OffloadTarget::none) {
    const bool sharded_optimizer = (s.strategy == ShardingStrategy::zero && s.zero_stage >= 1) ||
                                   s.strategy == ShardingStrategy::fsdp;
    if (!sharded_optimizer) {
      v.fail("training.offload.optimizer", "optimizer offload needs ZeRO stage >= 1 or FSDP (ZeRO-Offload / FSDP CPU offload)");
    }
    if (o.optimizer == OffloadTarget::nvme && !(s.strategy == ShardingStrategy::zero && s.zero_stage == 3)) {
      v.fail("training.offload.optimizer", "NVMe offload is ZeRO-Infinity: it needs strategy zero, stage 3");
    }
  }
  if (o.parameters != OffloadTarget::none) {
    if (!shards_parameters(s)) {
      v.fail("training.offload.parameters", "parameter offload needs sharded parameters (ZeRO stage 3 or FSDP full/hybrid shard)");
    }
    if (o.parameters == OffloadTarget::nvme && s.strategy != ShardingStrategy::zero) {
      v.fail("training.offload.parameters", "NVMe parameter offload is ZeRO-Infinity: it needs strategy zero, stage 3");
    }
  }
  if ((o.optimizer == OffloadTarget::nvme || o.parameters == OffloadTarget::nvme) && !cluster.nvme) {
    v.fail(o.optimizer == OffloadTarget::nvme ? "training.offload.optimizer" : "training.offload.parameters",
           "offloading to NVMe needs a cluster.nvme section");
  }
  return o;
}

FineTuningSpec build_fine_tuning(const ParamValues& v, const ModelSpec& model) {
  FineTuningSpec f;
  f.method = v.choice("training.fine_tuning.method", kFineTuningNames);
  for (const char* key : {"training.fine_tuning.lora_rank", "training.fine_tuning.lora_targets"}) {
    if (f.method == FineTuning::full && v.given(key)) v.fail(key, "is only meaningful with method: lora or qlora");
  }
  if (f.method != FineTuning::qlora && v.given("training.fine_tuning.double_quant")) {
    v.fail("training.fine_tuning.double_quant", "is only meaningful with method: qlora");
  }
  if (f.method == FineTuning::full) return f;
  if (!model.architecture_known) {
    v.fail("training.fine_tuning.method", "LoRA needs the model's architecture, not only its parameter count");
  }
  f.lora_rank = v.int32("training.fine_tuning.lora_rank");
  const bool gated = model.mlp == MlpKind::swiglu || model.mlp == MlpKind::geglu;
  for (const auto& name : v.items("training.fine_tuning.lora_targets")) {
    LoraTarget t = *kLoraTargetNames.parse(name);
    if (t == LoraTarget::gate_proj && !gated) {
      v.fail("training.fine_tuning.lora_targets", "gate_proj exists only in gated MLPs (swiglu, geglu)");
    }
    f.lora_targets.push_back(t);
  }
  if (f.method == FineTuning::qlora) f.double_quant = v.flag("training.fine_tuning.double_quant");
  return f;
}

}  // namespace

Training build_training(const ParamValues& v, const Cluster& cluster, const ModelSpec& model) {
  Training t;
  t.framework = v.choice("training.framework", kFrameworkNames);
  t.micro_batch = v.int32("training.micro_batch");
  t.seq_len = v.int32("training.seq_len");
  if (v.given("training.target_tokens")) t.target_tokens = v.number("training.target_tokens");
  t.precision = v.choice("training.precision", kPrecisionNames);
  if (t.precision != Precision::fp32 && !cluster.gpu.flops.count(t.precision)) {
    v.fail("training.precision", std::string(kPrecisionNames.name(t.precision)) + " needs tensor cores for it; the GPU '" +
                                     cluster.gpu.name + "' lists none (cluster.gpu.flops)");
  }
  t.optimizer = v.choice("training.optimizer", kOptimizerNames);
  t.parallelism = build_parallelism(v, cluster, model);
  const int dp = cluster.total_gpus() / (t.parallelism.tensor * t.parallelism.pipeline);
  const int cp = t.parallelism.context;
  const int shards = dp / cp;  // ranks on different sequences
  t.global_batch = v.given("training.global_batch") ? v.int32("training.global_batch") : t.micro_batch * shards;
  if (t.global_batch % (t.micro_batch * shards) != 0) {
    v.fail("training.global_batch", "global batch " + str(t.global_batch) + " is not a multiple of micro_batch " +
                                        str(t.micro_batch) + " x data-parallel size " + str(shards) +
                                        (cp > 1 ? " (GPUs / (tensor x context x pipeline))" : ""));
  }
  // Megatron-Core splits each sequence into 2 x context chunks, rank i taking chunks i and
  // 2cp-1-i, so that every rank gets an equal share of the causal attention work.
  if (cp > 1 && t.seq_len % (2 * cp) != 0) {
    v.fail("training.parallelism.context", "context parallel " + str(cp) + " needs seq_len (" + str(t.seq_len) +
                                               ") to be a multiple of 2 x context = " + str(2 * cp) +
                                               " (each rank takes two balanced chunks)");
  }
  if (model.architecture_known && model.position == PositionEmbedding::learned &&
      t.seq_len > model.max_position_embeddings) {
    v.fail("training.seq_len", str(t.seq_len) + " is longer than the model's " + str(model.max_position_embeddings) +
                                   " learned positions");
  }
  t.sharding = build_sharding(v, dp, cluster);
  t.offload = build_offload(v, t.sharding, cluster);
  t.recompute = v.choice("training.activation_checkpointing", kRecomputeNames);
  t.attention = v.choice("training.attention", kAttentionNames);
  if (cp > 1 && t.attention == AttentionImpl::explicit_scores) {
    v.fail("training.attention", "context parallelism runs fused (flash) attention over gathered keys and values; "
                                 "explicit scores are not modelled with it");
  }
  t.fine_tuning = build_fine_tuning(v, model);
  return t;
}

}  // namespace memtwin
