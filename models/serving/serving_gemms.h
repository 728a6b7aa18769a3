#pragma once
// The weight GEMMs of one serving iteration, as an engine runs them: per layer the fused QKV
// projection (vLLM's QKVParallelLinear), the attention output, a MoE layer's router (its logits
// over the experts, replicated on every rank), the fused gate and up projections
// (MergedColumnParallelLinear) and the down projection; then the output head for the positions
// that sample. The simulator's iteration model prices each by its shape and the hardware engine
// lays its weights out and multiplies by this same list, so the two run the same GEMMs.
#include <cstdint>
#include <string>
#include <vector>

#include "models/scenario.h"

namespace memtwin {

struct ServingGemm {
  enum class Role { qkv, attention_out, gate_up, down, head, router, count };
  Role role = Role::qkv;
  std::string name;              ///< "qkv_proj", "o_proj", "router", "gate_up_proj", "down_proj", "lm_head"
  std::int64_t inner = 0;        ///< k: input features on this tensor rank
  std::int64_t outputs = 0;      ///< n: output features on this tensor rank
  std::int64_t per_layer = 1;    ///< matrices of this shape in a layer (MoE: the experts); 1 for the head
  /// Rows each matrix multiplies per token of the batch: 1 for dense matrices, top-k / experts for
  /// an expert's (a router spreads the tokens); the head's rows are the sampled positions instead.
  double rows_per_token = 1;
  /// A routed expert's matrix under expert parallelism: its rows are counted per token of the whole
  /// expert-parallel group (every replica's batch, gathered), not of this replica.
  bool group_rows = false;
  [[nodiscard]] double elements() const { return static_cast<double>(inner) * static_cast<double>(outputs); }
  /// A routed expert's matrix (one of a MoE layer's `per_layer` experts).
  [[nodiscard]] bool routed() const { return (role == Role::gate_up || role == Role::down) && per_layer > 1; }
};

/// One layer's GEMMs in execution order, then the head, on one tensor rank of `tensor_parallel`
/// (column-parallel matrices split their outputs, the row-parallel attention output and down
/// projection their inputs, as Megatron-LM and vLLM do). With `expert_parallel` GPUs sharing a MoE
/// layer's experts (ServingSpec::expert_parallel_size, > 1), each GPU holds experts /
/// expert_parallel whole experts instead of a tensor slice of all of them. Needs the model's
/// architecture.
std::vector<ServingGemm> serving_weight_gemms(const ModelSpec& model, int tensor_parallel, int expert_parallel);

}  // namespace memtwin
