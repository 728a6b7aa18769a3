#pragma once
// Model states (parameters, gradients, optimizer states) per GPU, on the host and on NVMe, under
// each framework's byte conventions and each sharding strategy. References: the ZeRO paper (ideal),
// DeepSpeed's own estimators, Megatron-LM's 18 B/param and distributed optimizer, PyTorch FSDP's
// sharded fp32 flat parameters (../shared/REFERENCES.md).
#include "models/memory/rank_share.h"
#include "models/memory/sharding_strategy.h"
#include "models/scenario.h"
#include "models/units.h"

namespace memtwin {

/// Bytes per trainable parameter for each state, before sharding.
struct StateBytesPerParam {
  double parameters = 2;
  double gradients = 2;
  double optimizer = 12;  ///< includes the fp32 master copy where the framework keeps one apart
};

StateBytesPerParam state_bytes_per_param(const Training& training);

struct ModelStates {
  Bytes parameters;        ///< per GPU, persistent (the shard, or the whole stage)
  Bytes gradients;         ///< per GPU, persistent
  Bytes optimizer_states;  ///< per GPU
  Bytes host_pinned;       ///< per GPU's worth of offloaded states in pinned host memory
  Bytes host_pageable;     ///< per GPU's worth in pageable host memory
  Bytes nvme;              ///< per GPU's worth on NVMe
  double bytes_per_param_gpu = 0;  ///< (parameters + gradients + optimizer) / trainable parameters
};

ModelStates model_states(const Scenario& scenario, const RankShare& share);

/// QLoRA's NF4 storage per frozen weight: 4-bit codes plus one fp32 absmax per 64 weights, or with
/// double quantisation an 8-bit absmax per 64 and an fp32 constant per 256 of those.
double nf4_bytes_per_param(bool double_quant);

}  // namespace memtwin
