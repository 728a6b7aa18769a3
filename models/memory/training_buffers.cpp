#include "models/memory/training_buffers.h"

#include <algorithm>
#include <cmath>

#include "models/memory/rank_share.h"

namespace memtwin {
namespace {

// Gathered (unsharded) parameters and gradients of FSDP units in flight.
double fsdp_buffers(const Training& t, const RankShare& share, double element_bytes) {
  const double unit = t.sharding.wrap == FsdpWrap::whole_model ? share.parameters : share.block_parameters;
  const double root = t.sharding.wrap == FsdpWrap::whole_model ? 0 : share.root_parameters;
  switch (t.sharding.fsdp_mode) {
    case FsdpMode::full_shard:
    case FsdpMode::hybrid_shard: {
      // The root unit (embedding, head) stays gathered through the step; per block, the gathered
      // unit plus prefetched ones (the rate limiter allows two all-gathers in flight; without it
      // FSDP1 can run further ahead), and in backward one unit's unsharded gradient.
      const double units_in_flight = t.sharding.limit_all_gathers ? 2 : 3;
      return (root + units_in_flight * unit + unit) * element_bytes;
    }
    case FsdpMode::shard_grad_op:
      // Parameters stay unsharded from forward through backward (the ZeRO-2 analogue).
      return (share.parameters + unit) * element_bytes;
    case FsdpMode::no_shard:
      return 2 * unit * element_bytes;  // low-precision copies of the units being computed
  }
  return 0;
}

double deepspeed_buffers(const Training& t, const RankShare& share) {
  const DeepSpeedBuckets& b = t.sharding.deepspeed;
  const double fp16 = 2;
  if (t.sharding.zero_stage == 3) {
    // DeepSpeed's estimator counts the largest layer twice over (16-bit parameter and gradient,
    // "largest_layer_memory"); the prefetch and reduce buckets are real allocations on top,
    // bounded by stage3_max_live_parameters.
    const double gathered = std::min(b.max_live_parameters, share.largest_tensor + b.prefetch_bucket_size);
    return 4 * share.largest_tensor + fp16 * (gathered + b.reduce_bucket_size);
  }
  // Stages 0-2: the gradient reduce bucket (IPG buffer); stages 1-2 all-gather updated 16-bit
  // parameters through the all-gather bucket.
  double elements = b.reduce_bucket_size;
  if (t.sharding.zero_stage >= 1) elements += b.allgather_bucket_size;
  return fp16 * std::min(elements, 2 * share.trainable);
}

}  // namespace

Bytes training_buffers(const Scenario& s, const RankShare& share) {
  const Training& t = *s.training;
  const double element = t.precision == Precision::fp32 ? 4 : 2;
  double bytes = 0;
  switch (t.sharding.strategy) {
    case ShardingStrategy::ddp: {
      // PyTorch DDP's buckets hold a copy of every gradient (gradient_as_bucket_view=False);
      // Megatron's contiguous main_grad buffer is the gradient itself; ideal counts nothing.
      // One GPU has no data-parallel wrapper and so no buckets.
      const int dp = s.cluster.total_gpus() / (t.parallelism.tensor * t.parallelism.pipeline);
      if (dp > 1 && (t.framework == Framework::fsdp || t.framework == Framework::deepspeed)) {
        bytes += share.trainable * element;
      }
      break;
    }
    case ShardingStrategy::zero:
      if (t.framework == Framework::deepspeed) {
        bytes += deepspeed_buffers(t, share);
      } else if (t.sharding.zero_stage == 3) {
        bytes += 2 * share.block_parameters * element;  // the gathered block and the prefetched next
      }
      break;
    case ShardingStrategy::fsdp:
      if (t.framework == Framework::ideal && t.sharding.fsdp_mode != FsdpMode::shard_grad_op) {
        bytes += (t.sharding.fsdp_mode == FsdpMode::no_shard ? 0 : 2 * share.block_parameters * element);
      } else {
        bytes += fsdp_buffers(t, share, element);
      }
      break;
  }
  if (t.parallelism.pipeline > 1 && s.model.architecture_known) {
    // Send and receive buffers for activations and their gradients at each stage boundary.
    const double boundary = tokens_per_rank(t) * s.model.hidden * element /
                            (t.parallelism.sequence_parallel ? t.parallelism.tensor : 1);
    bytes += 4 * boundary;
  }
  return Bytes(static_cast<std::int64_t>(std::ceil(bytes)));
}

int communicators_per_gpu(const Scenario& s) {
  const Training& t = *s.training;
  const int dp = s.cluster.total_gpus() / (t.parallelism.tensor * t.parallelism.pipeline);
  int n = 0;
  if (dp > 1) {
    n += 1;
    const bool hybrid = t.sharding.strategy == ShardingStrategy::fsdp && t.sharding.fsdp_mode == FsdpMode::hybrid_shard;
    if (hybrid && t.sharding.shard_group < dp) n += 1;
  }
  if (t.parallelism.tensor > 1) n += 1;
  if (t.parallelism.pipeline > 1) n += 1;
  if (t.parallelism.expert > 1) n += 1;
  if (t.parallelism.context > 1) n += 1;
  return n;
}

}  // namespace memtwin
