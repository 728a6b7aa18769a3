#include "models/memory/rank_share.h"

#include <algorithm>

#include "models/memory/weight_shapes.h"
#include "models/model_facts.h"

namespace memtwin {

int data_parallel_size(const Cluster& cluster, const Training& t) {
  return cluster.total_gpus() / (t.parallelism.tensor * t.parallelism.pipeline);
}

int batch_shards(const Cluster& cluster, const Training& t) {
  return data_parallel_size(cluster, t) / t.parallelism.context;
}

double tokens_per_rank(const Training& t) {
  return static_cast<double>(t.seq_len) * t.micro_batch / t.parallelism.context;
}

RankShare rank_share(const ModelSpec& model, const Training& t) {
  RankShare share;
  const ParameterCount count = count_parameters(model);
  const bool lora = t.fine_tuning.method != FineTuning::full;
  if (!model.architecture_known) {
    share.parameters = share.trainable = count.total;
    share.largest_tensor = count.total;
    return share;
  }
  const double tp = t.parallelism.tensor;
  const int pp = t.parallelism.pipeline;
  const double ep = t.parallelism.expert;
  const int chunk_layers = (model.layers + pp * t.parallelism.interleave - 1) / (pp * t.parallelism.interleave);
  share.stage_layers = chunk_layers * t.parallelism.interleave;  // the heaviest stage of an uneven split

  // A block: matrices split over tensor ranks (experts over expert ranks), norms replicated.
  const double mlp_share = (count.mlp / ep) / tp;
  const double block = count.attention / tp + mlp_share + count.norms;
  share.block_parameters = block;

  const double embedding = (count.embedding + count.position) / tp;
  const double head = (model.tied_embeddings ? count.embedding : count.lm_head) / tp;
  // First stage: embedding (+ head and final norm when pp = 1). Last stage: head + final norm.
  const double first_root = embedding + (pp == 1 ? head + count.final_norm : 0);
  const double last_root = head + count.final_norm;
  const double first = share.stage_layers * block + first_root;
  const double last = share.stage_layers * block + last_root;
  share.has_output_layer = pp == 1 || last > first;
  share.root_parameters = share.has_output_layer && pp > 1 ? last_root : first_root;
  share.parameters = std::max(first, last);

  double largest = std::max(embedding, head);
  for (const auto& w : block_matrices(model)) largest = std::max(largest, w.rows * w.cols / tp);
  share.largest_tensor = largest;

  if (lora) {
    share.trainable = share.stage_layers * lora_parameters_per_block(model, t.fine_tuning) / tp;
    share.frozen_linear = share.stage_layers * (count.attention + count.mlp / ep) / tp;
    share.frozen_other = share.parameters - share.frozen_linear;
    share.parameters += share.trainable;
  } else {
    share.trainable = share.parameters;
  }
  return share;
}

}  // namespace memtwin
