#include "models/serving/serving_gemms.h"

#include "models/model_facts.h"

namespace memtwin {

std::vector<ServingGemm> serving_weight_gemms(const ModelSpec& m, int tensor_parallel, int expert_parallel) {
  const std::int64_t tp = tensor_parallel;
  const std::int64_t h = m.hidden;
  const std::int64_t q = static_cast<std::int64_t>(m.heads) * m.head_dim;
  const bool gated = m.mlp == MlpKind::swiglu || m.mlp == MlpKind::geglu;
  const std::int64_t inter = m.intermediate;
  const bool moe = m.experts > 1;
  const double expert_rows = moe ? static_cast<double>(m.experts_per_token) / m.experts : 1.0;
  using Role = ServingGemm::Role;
  const std::int64_t kv_rank = static_cast<std::int64_t>(kv_heads_per_rank(m, tensor_parallel)) * m.head_dim;
  // Expert parallelism: whole experts, a share of them per GPU, fed the whole group's tokens.
  const bool ep = moe && expert_parallel > 1;
  const std::int64_t expert_split = ep ? 1 : tp;
  const std::int64_t experts_here = moe ? m.experts / (ep ? expert_parallel : 1) : 1;
  std::vector<ServingGemm> out = {
      {Role::qkv, "qkv_proj", h, q / tp + 2 * kv_rank, 1, 1.0},
      {Role::attention_out, "o_proj", q / tp, h, 1, 1.0},
      {Role::gate_up, gated ? "gate_up_proj" : "up_proj", h, (gated ? 2 : 1) * inter / expert_split, experts_here, expert_rows, ep},
      {Role::down, "down_proj", inter / expert_split, h, experts_here, expert_rows, ep},
      {Role::head, "lm_head", h, static_cast<std::int64_t>(m.vocab) / tp, 1, 1.0},
  };
  if (moe) out.insert(out.begin() + 2, {Role::router, "router", h, m.experts, 1, 1.0});
  return out;
}

}  // namespace memtwin
