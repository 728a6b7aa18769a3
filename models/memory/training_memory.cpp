#include "models/memory/training_memory.h"

#include <algorithm>
#include <cmath>

#include "models/memory/rank_share.h"
#include "models/memory/training_buffers.h"
#include "models/unit_parse.h"

namespace memtwin {

TrainingMemory training_memory(const Scenario& s) {
  const Training& t = *s.training;
  const RuntimeOverheads& rt = s.cluster.runtime;
  TrainingMemory m;
  const RankShare share = rank_share(s.model, t);
  const ModelStates states = model_states(s, share);
  const ActivationMemory act = training_activations(s, share);

  m.architecture_known = s.model.architecture_known;
  m.data_parallel = data_parallel_size(s.cluster, t);
  m.shard_degree = sharding_layout(t, m.data_parallel).degree;
  m.trainable_parameters = share.trainable;
  m.bytes_per_param_gpu = states.bytes_per_param_gpu;
  m.in_flight_microbatches = act.in_flight_microbatches;
  m.gradient_accumulation = t.global_batch / (t.micro_batch * batch_shards(s.cluster, t));

  m.parameters = states.parameters;
  m.gradients = states.gradients;
  m.optimizer_states = states.optimizer_states;
  m.activations = act.total();
  m.buffers = training_buffers(s, share);
  m.runtime = rt.cuda_context + rt.framework_overhead + rt.nccl_buffers * communicators_per_gpu(s);
  m.fragmentation = Bytes(static_cast<std::int64_t>(
      std::ceil(rt.allocator_waste * (m.activations + m.buffers).as_double())));
  m.peak = m.parameters + m.gradients + m.optimizer_states + m.activations + m.buffers + m.runtime + m.fragmentation;
  m.capacity = s.cluster.gpu.memory;
  m.gpu_fits = m.peak <= m.capacity;

  const std::int64_t gpus = s.cluster.gpus_per_node;
  m.host_pinned = states.host_pinned * gpus;
  m.host_pageable = states.host_pageable * gpus;
  m.host_peak = m.host_pinned + m.host_pageable;
  m.host_capacity = s.cluster.host.memory;
  m.host_fits = m.host_peak <= m.host_capacity;
  m.nvme = states.nvme * gpus;
  m.nvme_capacity = s.cluster.nvme ? s.cluster.nvme->capacity : Bytes(0);
  m.nvme_fits = m.nvme.count() == 0 || m.nvme <= m.nvme_capacity;
  return m;
}

namespace {

std::string describe_change(const std::string& label, const TrainingMemory& before, const TrainingMemory& after) {
  std::string out = label + ": peak " + human_bytes(after.peak) + " (saves " + human_bytes(before.peak - after.peak) + ")";
  if (after.fits()) return out + " - fits";
  // A change that offloads fits the GPU only if host memory (or NVMe) holds what it moved there.
  if (after.gpu_fits && !after.host_fits) {
    return out + " - fits the GPU, but the offloaded states need " + human_bytes(after.host_peak) + " of host memory per node of " +
           human_bytes(after.host_capacity);
  }
  if (after.gpu_fits && !after.nvme_fits) return out + " - fits the GPU, but not the NVMe";
  return out;
}

}  // namespace

std::vector<std::string> training_fit_hints(const Scenario& s, const TrainingMemory& m) {
  std::vector<std::string> hints;
  if (!m.host_fits) {
    hints.push_back("host memory: offloaded states need " + human_bytes(m.host_peak) + " per node of " +
                    human_bytes(m.host_capacity) + "; offload to NVMe or use more nodes");
  }
  if (!m.nvme_fits) {
    hints.push_back("NVMe: offloaded states need " + human_bytes(m.nvme) + " per node of " + human_bytes(m.nvme_capacity));
  }
  if (m.gpu_fits) return hints;
  const Training& t = *s.training;
  std::vector<std::pair<Bytes, std::string>> ranked;
  auto consider = [&](const std::string& label, Scenario changed) {
    TrainingMemory after = training_memory(changed);
    if (after.peak < m.peak) ranked.emplace_back(m.peak - after.peak, describe_change(label, m, after));
  };
  if (t.recompute != Recompute::full) {
    Scenario c = s;
    c.training->recompute = Recompute::full;
    consider("training.activation_checkpointing=full", c);
  }
  if (t.micro_batch > 1) {
    Scenario c = s;
    c.training->micro_batch = 1;
    consider("training.micro_batch=1", c);
  }
  const bool zero3 = t.sharding.strategy == ShardingStrategy::zero && t.sharding.zero_stage == 3;
  const bool full_shard = t.sharding.strategy == ShardingStrategy::fsdp && t.sharding.fsdp_mode == FsdpMode::full_shard;
  if (!zero3 && !full_shard && m.data_parallel > 1) {
    Scenario c = s;
    c.training->sharding.strategy = ShardingStrategy::zero;
    c.training->sharding.zero_stage = 3;
    consider("training.sharding={strategy: zero, stage: 3}", c);
  }
  if (t.sharding.strategy != ShardingStrategy::ddp && t.offload.optimizer == OffloadTarget::none &&
      !(t.sharding.strategy == ShardingStrategy::zero && t.sharding.zero_stage == 0)) {
    Scenario c = s;
    c.training->offload.optimizer = OffloadTarget::cpu;
    consider("training.offload.optimizer=cpu", c);
  }
  // Sharded parameters can live in host memory too (ZeRO-Infinity's offload_param, FSDP's
  // CPUOffload(offload_params=True)), with the optimizer: what makes a 70B fine-tune fit one node.
  const bool hybrid_shard = t.sharding.strategy == ShardingStrategy::fsdp && t.sharding.fsdp_mode == FsdpMode::hybrid_shard;
  if ((zero3 || full_shard || hybrid_shard) && t.offload.parameters == OffloadTarget::none) {
    Scenario c = s;
    c.training->offload.parameters = OffloadTarget::cpu;
    const bool both = t.offload.optimizer == OffloadTarget::none;
    c.training->offload.optimizer = both ? OffloadTarget::cpu : t.offload.optimizer;
    consider(both ? "training.offload={optimizer: cpu, parameters: cpu}" : "training.offload.parameters=cpu", c);
  }
  if (m.architecture_known && t.parallelism.tensor < 8 && s.model.heads % (t.parallelism.tensor * 2) == 0 &&
      s.cluster.gpus_per_node % (t.parallelism.tensor * 2) == 0 &&
      (m.data_parallel / 2) % t.parallelism.context == 0) {
    Scenario c = s;
    c.training->parallelism.tensor *= 2;
    consider("training.parallelism.tensor=" + std::to_string(c.training->parallelism.tensor), c);
  }
  if (t.fine_tuning.method == FineTuning::full && m.architecture_known) {
    for (FineTuning method : {FineTuning::lora, FineTuning::qlora}) {
      Scenario c = s;
      c.training->fine_tuning.method = method;
      c.training->fine_tuning.lora_targets = {LoraTarget::q_proj, LoraTarget::k_proj, LoraTarget::v_proj, LoraTarget::o_proj};
      consider("training.fine_tuning.method=" + std::string(kFineTuningNames.name(method)) +
                   " (fine-tuning only; rank 16 on the attention projections)",
               c);
    }
  }
  {
    Scenario c = s;
    c.cluster.nodes *= 2;
    const int dp = batch_shards(c.cluster, *c.training);
    if (c.training->global_batch % (c.training->micro_batch * dp) != 0) c.training->global_batch = c.training->micro_batch * dp;
    consider("cluster.nodes=" + std::to_string(c.cluster.nodes), c);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (auto& r : ranked) hints.push_back(std::move(r.second));
  return hints;
}

}  // namespace memtwin
