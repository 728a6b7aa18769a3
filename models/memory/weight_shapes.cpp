#include "models/memory/weight_shapes.h"

namespace memtwin {

std::vector<WeightMatrix> block_matrices(const ModelSpec& m) {
  const double h = m.hidden;
  const double q = static_cast<double>(m.heads) * m.head_dim;
  const double kv = static_cast<double>(m.kv_heads) * m.head_dim;
  std::vector<WeightMatrix> out = {{"q_proj", h, q}, {"k_proj", h, kv}, {"v_proj", h, kv}, {"o_proj", q, h}};
  const bool gated = m.mlp == MlpKind::swiglu || m.mlp == MlpKind::geglu;
  if (gated) out.push_back({"gate_proj", h, static_cast<double>(m.intermediate), m.experts});
  out.push_back({"up_proj", h, static_cast<double>(m.intermediate), m.experts});
  out.push_back({"down_proj", static_cast<double>(m.intermediate), h, m.experts});
  return out;
}

std::optional<LoraTarget> lora_target_of(const WeightMatrix& m) { return kLoraTargetNames.parse(m.name); }

double lora_parameters_per_block(const ModelSpec& model, const FineTuningSpec& spec) {
  double total = 0;
  for (const auto& w : block_matrices(model)) {
    auto target = lora_target_of(w);
    if (!target) continue;
    for (LoraTarget t : spec.lora_targets) {
      if (t == *target) total += static_cast<double>(spec.lora_rank) * (w.rows + w.cols) * w.copies;
    }
  }
  return total;
}

}  // namespace memtwin
