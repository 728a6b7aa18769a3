#pragma once
// Activation memory of training, after Korthikanti et al. (MLSys'23, "Reducing Activation
// Recomputation in Large Transformer Models"), generalised from GPT's shapes to the real layer
// shapes (GQA, SwiGLU, MoE) and to FlashAttention. 16-bit activations, 1-byte dropout masks.
#include "models/memory/rank_share.h"
#include "models/scenario.h"
#include "models/units.h"

namespace memtwin {

/// Bytes one transformer block keeps for backward, per token of one sequence (s = b = 1 units:
/// multiply by s x b). `context` is the sequence length (explicit attention stores s scores per
/// head per token). Tensor parallel `t`, with or without sequence parallel, and the recompute
/// mode select the terms as in Korthikanti et al. Table 2.
double block_activation_bytes_per_token(const ModelSpec& model, int context, int tensor_parallel,
                                        bool sequence_parallel, Recompute recompute, AttentionImpl attention);

/// Context parallelism: the keys and values of one block over the whole sequence, for this
/// rank's key/value heads (replicated when tensor ranks outnumber them), as the all-gather before
/// attention assembles them (Llama 3's all-gather form of context parallelism). Zero without it.
double context_gathered_kv_bytes(const ModelSpec& model, const Training& training);

struct ActivationMemory {
  Bytes stored;           ///< blocks' saved activations for all in-flight micro-batches
  Bytes working;          ///< the one block recomputed or being back-propagated, plus output logits
  Bytes total() const { return stored + working; }
  int in_flight_microbatches = 1;
};

ActivationMemory training_activations(const Scenario& scenario, const RankShare& share);

}  // namespace memtwin
