#include "models/memory/communication.h"

#include "models/memory/rank_share.h"
#include "models/memory/model_states.h"

namespace memtwin {

DataParallelTraffic data_parallel_traffic(const Scenario& s) {
  const Training& t = *s.training;
  DataParallelTraffic out;
  const int dp = data_parallel_size(s.cluster, t);
  if (dp == 1) return out;
  const RankShare share = rank_share(s.model, t);
  const double element = t.precision == Precision::fp32 ? 4 : 2;
  const double model_bytes = share.trainable * element;  // M: what one replica's gradients weigh
  const double gathered_bytes = share.parameters * element;
  const int microbatches = t.global_batch / (t.micro_batch * batch_shards(s.cluster, t));
  const ShardingLayout layout = sharding_layout(t, dp);
  const double ring = (layout.degree - 1.0) / layout.degree;
  const int gpus_per_node = s.cluster.gpus_per_node;
  // Inside a node when the whole sharding group fits on one (tensor/pipeline ranks fill it first).
  const int dp_per_node = std::max(1, gpus_per_node / (t.parallelism.tensor * t.parallelism.pipeline));

  if (layout.parameters && t.sharding.fsdp_mode != FsdpMode::shard_grad_op) {
    // Parameters gathered for forward and again for backward, for every micro-batch; gradients
    // reduce-scattered once per step.
    out.all_gather_bytes = 2.0 * microbatches * gathered_bytes * ring;
    out.reduce_scatter_bytes = model_bytes * ring;
  } else if (layout.gradients || layout.optimizer || layout.parameters) {
    // ZeRO-1/2 and FSDP shard_grad_op: reduce-scatter gradients, all-gather the updated parameters
    // once per step, after the optimizer step.
    out.reduce_scatter_bytes = model_bytes * ring;
    out.all_gather_bytes = gathered_bytes * ring;
  } else {
    out.all_reduce_bytes = 2.0 * model_bytes * (dp - 1.0) / dp;
  }
  const bool hybrid = t.sharding.strategy == ShardingStrategy::fsdp && t.sharding.fsdp_mode == FsdpMode::hybrid_shard;
  if (hybrid && layout.degree < dp) {
    // Across shard groups each GPU all-reduces its gradient shard: 2 (M / G) (R - 1) / R for R groups.
    const double replicas = static_cast<double>(dp) / layout.degree;
    const double across = 2.0 * (model_bytes / layout.degree) * (replicas - 1) / replicas;
    out.all_reduce_bytes += across;
    out.cross_host_bytes = layout.degree <= dp_per_node ? across : out.total();
  } else {
    out.cross_host_bytes = dp <= dp_per_node ? 0 : out.total();
  }
  return out;
}

}  // namespace memtwin
