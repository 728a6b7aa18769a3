#pragma once
// What one GPU holds of the model under tensor, pipeline and expert parallelism: the parameter
// counts of the heaviest pipeline stage (the first stage holds the embedding and, for 1F1B, the most
// activations; the last the output head), split over tensor ranks as Megatron does (vocab-parallel
// embedding and head, column/row-parallel matrices, replicated norms).
#include "models/scenario.h"

namespace memtwin {

struct RankShare {
  double parameters = 0;        ///< all parameters on this GPU (before data-parallel sharding)
  double trainable = 0;         ///< of which trained (all, or LoRA adapters only)
  double frozen_linear = 0;     ///< frozen block matrices (LoRA/QLoRA base weights)
  double frozen_other = 0;      ///< frozen embedding, head and norms
  double largest_tensor = 0;    ///< largest single weight tensor on this GPU (elements)
  double block_parameters = 0;  ///< one transformer block's share (an FSDP unit)
  double root_parameters = 0;   ///< embedding + head + final norm on this GPU (FSDP's root unit)
  int stage_layers = 0;         ///< blocks on this pipeline stage
  bool has_output_layer = true; ///< the stage computes logits and the loss
};

/// The share of the first pipeline stage, or of the last one when that is heavier.
RankShare rank_share(const ModelSpec& model, const Training& training);

/// Ranks holding the same weights: GPUs / (tensor x pipeline). Gradients are reduced, and ZeRO/FSDP
/// shard, over them; with context parallelism they include the context ranks (Megatron-Core's
/// data-parallel-with-context group).
int data_parallel_size(const Cluster& cluster, const Training& training);

/// Ranks working on different sequences: the data-parallel size over the context-parallel size.
/// The global batch is split over them (micro-batches per step = global / (micro x batch shards)).
int batch_shards(const Cluster& cluster, const Training& training);

/// Tokens of one micro-batch on one rank: micro_batch x seq_len over the context-parallel size.
double tokens_per_rank(const Training& training);

}  // namespace memtwin
