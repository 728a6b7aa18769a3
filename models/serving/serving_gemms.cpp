#include "models/serving/serving_gemms.h"

#include "models/model_facts.h"

namespace memtwin {

std::vector<ServingGemm> serving_weight_gemms(const ModelSpec& m, int tensor_parallel) {
  const std::int64_t tp = tensor_parallel;
  const std::int64_t h = m.hidden;
  const std::int64_t q = static_cast<std::int64_t>(m.heads) * m.head_dim;
  const bool gated = m.mlp == MlpKind::swiglu || m.mlp == MlpKind::geglu;
  const std::int64_t inter = m.intermediate;
  const bool moe = m.experts > 1;
  const double expert_rows = moe ? static_cast<double>(m.experts_per_token) / m.experts : 1.0;
  using Role = ServingGemm::Role;
  const std::int64_t kv_rank = static_cast<std::int64_t>(kv_heads_per_rank(m, tensor_parallel)) * m.head_dim;
  return {
      {Role::qkv, "qkv_proj", h, q / tp + 2 * kv_rank, 1, 1.0},
      {Role::attention_out, "o_proj", q / tp, h, 1, 1.0},
      {Role::gate_up, gated ? "gate_up_proj" : "up_proj", h, (gated ? 2 : 1) * inter / tp, moe ? m.experts : 1, expert_rows},
      {Role::down, "down_proj", inter / tp, h, moe ? m.experts : 1, expert_rows},
      {Role::head, "lm_head", h, static_cast<std::int64_t>(m.vocab) / tp, 1, 1.0},
  };
}

}  // namespace memtwin
