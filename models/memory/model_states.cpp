#include "models/memory/model_states.h"

#include <algorithm>
#include <cmath>

#include "models/memory/weight_shapes.h"

namespace memtwin {
namespace {

// Optimizer state bytes per parameter beyond the weights themselves (K of the ZeRO paper, without
// the fp32 master copy): Adam keeps m and v, SGD with momentum one buffer, plain SGD nothing,
// Adafactor its factored second moments (counted separately from the shapes).
double moment_bytes(Optimizer o) {
  switch (o) {
    case Optimizer::adam:
    case Optimizer::adamw: return 8;
    case Optimizer::sgd_momentum: return 4;
    case Optimizer::sgd:
    case Optimizer::adafactor: return 0;
  }
  return 0;
}

}  // namespace

double nf4_bytes_per_param(bool double_quant) {
  // Dettmers et al. 2023: constants cost 0.5 bits per parameter, 0.127 with double quantisation.
  const double constants_bits = double_quant ? 8.0 / 64 + 32.0 / (64 * 256) : 32.0 / 64;
  return (4.0 + constants_bits) / 8;
}

StateBytesPerParam state_bytes_per_param(const Training& t) {
  const double moments = moment_bytes(t.optimizer);
  if (t.precision == Precision::fp32) return {4, 4, moments};  // no separate master copy
  switch (t.framework) {
    case Framework::ideal: return {2, 2, 4 + moments};            // ZeRO paper: 2 + 2 + K, K = 12 for Adam
    case Framework::deepspeed: return {2, 2, 4 + 4 + moments};    // + fp32 gradient partition (18 B/param at stage 3)
    case Framework::megatron: return {2, 4, 4 + moments};         // fp32 main_grad: 18 B/param, 6 + 12/DP distributed
    case Framework::fsdp: return {4, 4, moments};                 // the sharded fp32 flat parameter is the master
  }
  return {};
}

ModelStates model_states(const Scenario& s, const RankShare& share) {
  const Training& t = *s.training;
  const int dp = s.cluster.total_gpus() / (t.parallelism.tensor * t.parallelism.pipeline);
  const ShardingLayout layout = sharding_layout(t, dp);
  const StateBytesPerParam per = state_bytes_per_param(t);
  auto shard = [&](double bytes, bool sharded) { return sharded ? bytes / layout.degree : bytes; };

  // Trainable parameters carry all three states; frozen ones (LoRA base) only their weights.
  double optimizer = share.trainable * per.optimizer;
  if (t.optimizer == Optimizer::adafactor && s.model.architecture_known) {
    // Factored second moment: one fp32 row and one column vector per trained matrix.
    double vectors = 0;
    if (t.fine_tuning.method == FineTuning::full) {
      for (const auto& w : block_matrices(s.model)) vectors += (w.rows + w.cols) * w.copies;
      vectors = vectors * share.stage_layers / t.parallelism.tensor + s.model.vocab + s.model.hidden;
    }
    optimizer += 4 * vectors;
  }
  double grads = share.trainable * per.gradients;
  double params = share.trainable * per.parameters;
  const double frozen_dtype = t.precision == Precision::fp32 ? 4 : 2;
  if (t.fine_tuning.method == FineTuning::qlora) {
    params += share.frozen_linear * nf4_bytes_per_param(t.fine_tuning.double_quant) + share.frozen_other * frozen_dtype;
  } else {
    params += (share.frozen_linear + share.frozen_other) * frozen_dtype;
  }

  bool grads_sharded = layout.gradients;
  if (t.framework == Framework::deepspeed && t.sharding.strategy == ShardingStrategy::zero) {
    // DeepSpeed's estimators: stage <= 2 keeps 2 B/param of 16-bit gradients unpartitioned
    // (4Ψ + 16Ψ/N at stage 2); stage 3 keeps none past the reduce buckets (18Ψ/N).
    grads_sharded = false;
    if (t.sharding.zero_stage == 3) grads = 0;
  }

  ModelStates out;
  double gpu_params = shard(params, layout.parameters);
  double gpu_grads = shard(grads, grads_sharded);
  double gpu_optimizer = shard(optimizer, layout.optimizer);

  double host = 0, nvme = 0;
  const double host_factor = t.framework == Framework::deepspeed ? 1.5 : 1.0;  // DeepSpeed's host estimate margin
  if (t.offload.optimizer == OffloadTarget::cpu) {
    host += gpu_optimizer * host_factor;
    gpu_optimizer = 0;
  } else if (t.offload.optimizer == OffloadTarget::nvme) {
    nvme += gpu_optimizer;
    // The optimizer steps one sub-group at a time in host memory.
    const double per_param = share.trainable > 0 ? gpu_optimizer / (share.trainable / layout.degree) : 0;
    host += std::min(t.sharding.deepspeed.sub_group_size, share.trainable / layout.degree) * per_param;
    gpu_optimizer = 0;
  }
  if (t.offload.parameters != OffloadTarget::none) {
    if (t.sharding.strategy == ShardingStrategy::fsdp) {
      // FSDP CPUOffload(offload_params=True): sharded parameters and their gradients live on the CPU,
      // and the optimizer steps there.
      host += gpu_params + gpu_grads + gpu_optimizer;
      gpu_params = gpu_grads = gpu_optimizer = 0;
    } else if (t.offload.parameters == OffloadTarget::cpu) {
      host += gpu_params * host_factor;
      gpu_params = 0;
    } else {
      nvme += gpu_params;
      gpu_params = 0;
    }
  }
  out.parameters = ceil_bytes(gpu_params);
  out.gradients = ceil_bytes(gpu_grads);
  out.optimizer_states = ceil_bytes(gpu_optimizer);
  (t.offload.pin_memory ? out.host_pinned : out.host_pageable) = ceil_bytes(host);
  out.nvme = ceil_bytes(nvme);
  out.bytes_per_param_gpu =
      share.trainable > 0 ? (gpu_params + gpu_grads + gpu_optimizer) / share.trainable : 0;
  return out;
}

}  // namespace memtwin
