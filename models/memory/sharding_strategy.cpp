#include "models/memory/sharding_strategy.h"

#include <algorithm>
#include <cmath>

namespace memtwin {
namespace {

bool deepspeed_zero(const Training& t) {
  return t.framework == Framework::deepspeed && t.sharding.strategy == ShardingStrategy::zero;
}

// Blocks DeepSpeed's ZeRO-3 coordinator gathers ahead of the one computing: it prefetches up to
// stage3_prefetch_bucket_size parameters ahead (at least the next parameter, so at least the next
// block's first), as long as every gathered parameter stays within stage3_max_live_parameters.
// A block of more than half max_live_parameters is never prefetched: its gather waits for the
// previous block's release (175B GPT: 1.8e9 parameters per block against the default 1e9).
int deepspeed_prefetch_blocks(const DeepSpeedBuckets& b, double block_params) {
  if (block_params <= 0) return 1;
  const double by_bucket = std::max(1.0, std::floor(b.prefetch_bucket_size / block_params));
  const double by_live = std::floor(b.max_live_parameters / block_params) - 1;
  return static_cast<int>(std::clamp(std::min(by_bucket, by_live), 0.0, 1e6));
}

// The buckets each framework allocates at start-up and keeps.
std::vector<PersistentBuffer> buckets(const Training& t, const RankShare& share, int dp, double element) {
  std::vector<PersistentBuffer> out;
  const DeepSpeedBuckets& b = t.sharding.deepspeed;
  switch (t.sharding.strategy) {
    case ShardingStrategy::ddp:
      // PyTorch DDP's buckets hold a copy of every gradient (gradient_as_bucket_view=False);
      // Megatron's contiguous main_grad buffer is the gradient itself; ideal counts nothing.
      // One GPU has no data-parallel wrapper and so no buckets.
      if (dp > 1 && (t.framework == Framework::fsdp || t.framework == Framework::deepspeed)) {
        out.push_back({"ddp_buckets", ceil_bytes(share.trainable * element)});
      }
      break;
    case ShardingStrategy::zero:
      if (!deepspeed_zero(t)) break;
      if (t.sharding.zero_stage == 3) {
        // Stage 3's contiguous-gradients buffer (the IPG bucket): reduce_bucket_size elements of
        // the parameters' dtype, allocated once whatever the model's size.
        out.push_back({"zero.reduce_bucket", ceil_bytes(b.reduce_bucket_size * element)});
      } else {
        // Stages 0-2: the gradient reduce bucket and, from stage 1, the bucket updated parameters
        // are all-gathered through; together never more than the gradients and parameters.
        const double limit = 2 * share.trainable;
        const double reduce = std::min(b.reduce_bucket_size, limit);
        out.push_back({"zero.reduce_bucket", ceil_bytes(reduce * element)});
        if (t.sharding.zero_stage >= 1) {
          const double gather = std::min(b.reduce_bucket_size + b.allgather_bucket_size, limit) - reduce;
          out.push_back({"zero.allgather_bucket", ceil_bytes(gather * element)});
        }
      }
      break;
    case ShardingStrategy::fsdp:
      // Otherwise FSDP's buffers are the gathered units themselves. shard_grad_op keeps its
      // parameters sharded at rest but unsharded from a step's forward to its backward, so a step
      // holds them whole throughout (the plan gathers them once per step, after the optimizer).
      if (t.sharding.fsdp_mode == FsdpMode::shard_grad_op && dp > 1) {
        out.push_back({"fsdp.unsharded_parameters", ceil_bytes(share.parameters * element)});
      }
      break;
  }
  return out;
}

}  // namespace

ShardingLayout sharding_layout(const Training& t, int dp) {
  ShardingLayout l;
  l.degree = dp;
  const Sharding& s = t.sharding;
  switch (s.strategy) {
    case ShardingStrategy::ddp: break;
    case ShardingStrategy::zero:
      l.optimizer = s.zero_stage >= 1;
      l.gradients = s.zero_stage >= 2;
      l.parameters = s.zero_stage >= 3;
      break;
    case ShardingStrategy::fsdp:
      if (s.fsdp_mode == FsdpMode::no_shard) break;
      l.optimizer = l.gradients = l.parameters = true;  // shard_grad_op also keeps sharded persistent params
      if (s.fsdp_mode == FsdpMode::hybrid_shard) l.degree = s.shard_group;
      break;
  }
  return l;
}

bool gathers_parameters(const Training& t) {
  return (t.sharding.strategy == ShardingStrategy::zero && t.sharding.zero_stage == 3) ||
         (t.sharding.strategy == ShardingStrategy::fsdp &&
          (t.sharding.fsdp_mode == FsdpMode::full_shard || t.sharding.fsdp_mode == FsdpMode::hybrid_shard));
}

Bytes ShardingDescriptor::persistent_bytes() const {
  Bytes total(0);
  for (const auto& b : persistent_buffers) total += b.size;
  return total;
}

ShardingDescriptor describe_sharding(const Scenario& s, const RankShare& share, int dp) {
  const Training& t = *s.training;
  const double element = t.precision == Precision::fp32 ? 4 : 2;
  ShardingDescriptor d;
  d.layout = sharding_layout(t, dp);
  d.gathers_parameters = gathers_parameters(t);
  if (d.gathers_parameters) {
    // FSDP's rate limiter allows two all-gathers in flight (the next unit's); without it FSDP1
    // runs one further ahead.
    d.prefetch_blocks = deepspeed_zero(t) ? deepspeed_prefetch_blocks(t.sharding.deepspeed, share.block_parameters)
                                          : (t.sharding.limit_all_gathers ? 1 : 2);
  }
  // DeepSpeed copies each gradient into its reduce bucket as it is produced (counted with its
  // largest layer); the ideal convention counts no gradient buffer.
  d.unsharded_block_gradient = d.gathers_parameters && t.sharding.strategy == ShardingStrategy::fsdp &&
                               t.framework != Framework::ideal;
  d.persistent_buffers = buckets(t, share, dp, element);
  return d;
}

}  // namespace memtwin
