#pragma once
// Emits one training step (all micro-batches, the gradient reduction and the optimizer step) as a
// Plan, following the scenario's sharding strategy:
//   DDP / ZeRO-0: forward, backward; on the last micro-batch each block's gradients are all-reduced
//     as soon as its backward is done (overlapping the rest of backward).
//   ZeRO-1/2 (and FSDP shard_grad_op): the same with reduce-scatter; after the optimizer step the
//     updated parameters are all-gathered block by block.
//   ZeRO-3 / FSDP full and hybrid shard: each block's parameters are all-gathered before its forward
//     and again before its backward (prefetched: at most `limit_all_gathers` ahead), freed after use;
//     gradients are reduce-scattered after each block's backward on the last micro-batch; hybrid
//     shard then all-reduces the shard across replica groups.
// Tensor parallelism adds two all-reduces per block in forward and two in backward (reduce-scatter
// plus all-gather with sequence parallelism). Recompute adds the forward again in backward.
// Offloading adds PCIe copies and runs the optimizer on the CPU.
// Pipeline parallelism gives one program per stage, in the schedule's order (GPipe or 1F1B),
// with activations and their gradients sent between neighbouring stages. The interleaved
// schedule and expert parallelism are not emitted yet (PlanUnsupported).
#include <stdexcept>

#include "models/backend.h"
#include "models/plan/plan.h"
#include "models/scenario.h"

namespace memtwin {

using PlanUnsupported = Unsupported;

/// Model FLOPs of one step per GPU (Korthikanti et al. eq. 7 generalised: 3x the forward, no
/// recompute, full attention), the numerator of MFU.
double model_flops_per_gpu_step(const Scenario& scenario);

Plan build_training_plan(const Scenario& scenario);

}  // namespace memtwin
