#include "models/memory/training_buffers.h"

#include <algorithm>
#include <cmath>

#include "models/memory/rank_share.h"
#include "models/memory/sharding_strategy.h"

namespace memtwin {
namespace {

// Gathered (unsharded) parameters and gradients of FSDP units in flight.
double fsdp_buffers(const Training& t, const RankShare& share, const ShardingDescriptor& d, double element_bytes) {
  const double unit = t.sharding.wrap == FsdpWrap::whole_model ? share.parameters : share.block_parameters;
  const double root = t.sharding.wrap == FsdpWrap::whole_model ? 0 : share.root_parameters;
  switch (t.sharding.fsdp_mode) {
    case FsdpMode::full_shard:
    case FsdpMode::hybrid_shard: {
      // The root unit (embedding, head) stays gathered through the step; per block, the gathered
      // unit plus the prefetched ones, and in backward one unit's unsharded gradient.
      const double units_in_flight = 1 + d.prefetch_blocks;
      return (root + units_in_flight * unit + (d.unsharded_block_gradient ? unit : 0)) * element_bytes;
    }
    case FsdpMode::shard_grad_op:
      // The unsharded parameters are a persistent buffer (sharding_strategy.h); gradients go
      // straight into their reduce-scatter, as ZeRO-2's.
      return 0;
    case FsdpMode::no_shard:
      // Mixed precision casts the fp32 flat parameters of the units being computed to low-precision
      // copies; in fp32 the units compute on their flat parameters directly.
      return t.precision != Precision::fp32 ? 2 * unit * element_bytes : 0;
  }
  return 0;
}

// DeepSpeed ZeRO-3's transient buffers beside its reduce bucket: the estimator counts the largest
// layer twice over (16-bit parameter and gradient, "largest_layer_memory"); the prefetch bucket
// gathers ahead, bounded by stage3_max_live_parameters and by what there is to gather.
double deepspeed_zero3_transient(const Training& t, const RankShare& share, double element) {
  const DeepSpeedBuckets& b = t.sharding.deepspeed;
  const double gathered =
      std::min({b.max_live_parameters, share.largest_tensor + b.prefetch_bucket_size, share.parameters});
  return 4 * share.largest_tensor + element * gathered;
}

}  // namespace

Bytes training_buffers(const Scenario& s, const RankShare& share) {
  const Training& t = *s.training;
  const double element = t.precision == Precision::fp32 ? 4 : 2;
  const ShardingDescriptor sharding = describe_sharding(s, share, data_parallel_size(s.cluster, t));
  double bytes = sharding.persistent_bytes().as_double();
  switch (t.sharding.strategy) {
    case ShardingStrategy::ddp: break;
    case ShardingStrategy::zero:
      if (t.sharding.zero_stage != 3) break;
      if (t.framework == Framework::deepspeed) {
        bytes += deepspeed_zero3_transient(t, share, element);
      } else {
        bytes += 2 * share.block_parameters * element;  // the gathered block and the prefetched next
      }
      break;
    case ShardingStrategy::fsdp:
      if (t.framework == Framework::ideal && t.sharding.fsdp_mode != FsdpMode::shard_grad_op) {
        bytes += (t.sharding.fsdp_mode == FsdpMode::no_shard ? 0 : 2 * share.block_parameters * element);
      } else {
        bytes += fsdp_buffers(t, share, sharding, element);
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
