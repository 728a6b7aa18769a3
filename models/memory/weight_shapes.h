#pragma once
// The weight matrices of one transformer block (and of the embedding and output head), with the
// names LoRA targets use. The memory model derives LoRA adapter sizes, Adafactor's factored states,
// the largest gathered tensor and FSDP unit sizes from these shapes, not from rules of thumb.
#include <string>
#include <vector>

#include "models/enums.h"
#include "models/scenario.h"

namespace memtwin {

struct WeightMatrix {
  std::string name;        ///< "q_proj", "up_proj", ...
  double rows = 0;         ///< input features
  double cols = 0;         ///< output features
  int copies = 1;          ///< MoE: one per expert
  [[nodiscard]] double elements() const { return rows * cols * copies; }
};

/// The matrices of one block in execution order: q, k, v, o, then the MLP (gate, up, down for
/// gated MLPs; up, down otherwise), each expert counted in `copies`.
std::vector<WeightMatrix> block_matrices(const ModelSpec& model);

/// The LoRA target of a block matrix, if it is one ("q_proj" -> LoraTarget::q_proj).
std::optional<LoraTarget> lora_target_of(const WeightMatrix& m);

/// Trainable LoRA parameters per block: rank x (in + out) for every targeted matrix.
double lora_parameters_per_block(const ModelSpec& model, const FineTuningSpec& spec);

}  // namespace memtwin
