#pragma once
// The weight GEMMs of one serving iteration, as an engine runs them: per layer the fused QKV
// projection (vLLM's QKVParallelLinear), the attention output, the fused gate and up projections
// (MergedColumnParallelLinear) and the down projection; then the output head for the positions
// that sample. The simulator's iteration model prices each by its shape and the hardware engine
// lays its weights out and multiplies by this same list, so the two run the same GEMMs.
#include <cstdint>
#include <string>
#include <vector>

#include "models/scenario.h"

namespace memtwin {

struct ServingGemm {
  enum class Role { qkv, attention_out, gate_up, down, head };
  Role role = Role::qkv;
  std::string name;              ///< "qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head"
  std::int64_t inner = 0;        ///< k: input features on this tensor rank
  std::int64_t outputs = 0;      ///< n: output features on this tensor rank
  std::int64_t per_layer = 1;    ///< matrices of this shape in a layer (MoE: the experts); 1 for the head
  /// Rows each matrix multiplies per token of the batch: 1 for dense matrices, top-k / experts for
  /// an expert's (a router spreads the tokens); the head's rows are the sampled positions instead.
  double rows_per_token = 1;
  [[nodiscard]] double elements() const { return static_cast<double>(inner) * static_cast<double>(outputs); }
};

/// One layer's GEMMs in execution order, then the head, on one tensor rank of `tensor_parallel`
/// (column-parallel matrices split their outputs, the row-parallel attention output and down
/// projection their inputs, as Megatron-LM and vLLM do). Needs the model's architecture.
std::vector<ServingGemm> serving_weight_gemms(const ModelSpec& model, int tensor_parallel);

}  // namespace memtwin
