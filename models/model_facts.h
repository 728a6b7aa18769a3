#pragma once
// Facts that follow from a model's architecture alone: parameter counts by part, FLOPs per token,
// KV-cache bytes per token. Pure functions of ModelSpec; the tests hold them to published counts.
#include "models/scenario.h"
#include "models/units.h"

namespace memtwin {

/// Parameter counts (elements, not bytes). For a parameters-only model only `total` is known.
struct ParameterCount {
  double embedding = 0;        ///< token embedding (vocab x hidden)
  double position = 0;         ///< learned position embedding
  double attention = 0;        ///< per layer: q, k, v, o projections with their biases
  double mlp = 0;              ///< per layer, all experts (+ router)
  double mlp_active = 0;       ///< per layer, experts one token uses (+ router)
  double norms = 0;            ///< per layer
  double final_norm = 0;
  double lm_head = 0;          ///< 0 when tied to the embedding
  double per_layer = 0;        ///< attention + mlp + norms
  double total = 0;
  double active = 0;           ///< parameters one token touches (MoE: top-k experts)
};

ParameterCount count_parameters(const ModelSpec& model);

/// Matrix-multiply weights one token multiplies through in a forward pass (attention projections,
/// active MLP experts, output head). Embedding lookups, norms and biases are not matmuls.
double matmul_parameters_per_token(const ModelSpec& model);

/// Elements the memory-bound kernels of one block move per token, read plus written: two norms
/// (h in, h out), two residual adds (2h in, h out), rotary on q and k, the gated activation (2I in,
/// I out) or GeLU (I in, I out), and dropout where the model uses it (training only). Tensor
/// parallelism splits the heads and the MLP.
double block_elementwise_elements_per_token(const ModelSpec& model, int tensor_parallel, bool training);

/// Forward FLOPs for one token attending over `context` tokens: 2 per matmul weight plus
/// 4 x layers x context x heads x head_dim for QK^T and AV (Korthikanti et al. eq. 7 per token,
/// without the causal halving, as in that paper). Training is 3x this without recompute.
Flops forward_flops_per_token(const ModelSpec& model, int context);

/// Key/value heads each tensor-parallel rank holds: its share, or one replicated head when there
/// are more ranks than heads (as vLLM and Megatron-LM replicate them).
int kv_heads_per_rank(const ModelSpec& model, int tensor_parallel);

/// KV-cache bytes for one token on one GPU: 2 (K and V) x layers x kv_heads x head_dim x
/// bytes_per_element, with kv_heads split over tensor ranks (kv_heads_per_rank) and layers over
/// pipeline stages (the largest stage).
Bytes kv_bytes_per_token(const ModelSpec& model, double bytes_per_element, int tensor_parallel = 1,
                         int pipeline_parallel = 1);

}  // namespace memtwin
