#include "models/model_facts.h"

#include <cmath>

namespace memtwin {

ParameterCount count_parameters(const ModelSpec& m) {
  ParameterCount c;
  if (!m.architecture_known) {
    c.total = c.active = m.parameters_override;
    return c;
  }
  const double h = m.hidden;
  const double q_width = static_cast<double>(m.heads) * m.head_dim;
  const double kv_width = static_cast<double>(m.kv_heads) * m.head_dim;
  const bool all_bias = m.bias == BiasKind::all;

  c.embedding = static_cast<double>(m.vocab) * h;
  c.position = m.position == PositionEmbedding::learned ? static_cast<double>(m.max_position_embeddings) * h : 0;
  c.attention = h * (q_width + 2 * kv_width) + q_width * h;
  if (m.bias != BiasKind::none) c.attention += q_width + 2 * kv_width;  // q, k, v biases
  if (all_bias) c.attention += h;                                        // o bias

  const bool gated = m.mlp == MlpKind::swiglu || m.mlp == MlpKind::geglu;
  double expert = (gated ? 3.0 : 2.0) * h * m.intermediate;
  if (all_bias) expert += m.intermediate + h;
  const double router = m.experts > 1 ? h * m.experts : 0;
  c.mlp = expert * m.experts + router;
  c.mlp_active = expert * m.experts_per_token + router;

  const double norm_size = m.norm == NormKind::layernorm ? 2 * h : h;  // LayerNorm has a bias
  c.norms = 2 * norm_size;
  c.final_norm = norm_size;
  c.lm_head = m.tied_embeddings ? 0 : static_cast<double>(m.vocab) * h;
  c.per_layer = c.attention + c.mlp + c.norms;
  c.total = c.embedding + c.position + m.layers * c.per_layer + c.final_norm + c.lm_head;
  c.active = c.total - m.layers * (c.mlp - c.mlp_active);
  return c;
}

double matmul_parameters_per_token(const ModelSpec& m) {
  if (!m.architecture_known) return m.parameters_override;
  const double h = m.hidden;
  const double q_width = static_cast<double>(m.heads) * m.head_dim;
  const double kv_width = static_cast<double>(m.kv_heads) * m.head_dim;
  const bool gated = m.mlp == MlpKind::swiglu || m.mlp == MlpKind::geglu;
  const double attention = h * (q_width + 2 * kv_width) + q_width * h;
  const double mlp = (gated ? 3.0 : 2.0) * h * m.intermediate * m.experts_per_token + (m.experts > 1 ? h * m.experts : 0);
  return m.layers * (attention + mlp) + static_cast<double>(m.vocab) * h;  // the output head is always a matmul
}

double block_elementwise_elements_per_token(const ModelSpec& m, int tensor_parallel, bool training) {
  const double tp = tensor_parallel;
  const double q_width = static_cast<double>(m.heads) * m.head_dim / tp;
  const double kv_width = static_cast<double>(m.kv_heads) * m.head_dim / tp;
  const bool gated = m.mlp == MlpKind::swiglu || m.mlp == MlpKind::geglu;
  const double inner = static_cast<double>(m.intermediate) * m.experts_per_token / tp;
  return 4.0 * m.hidden + 6.0 * m.hidden + 2 * (q_width + kv_width) + (gated ? 3 * inner : 2 * inner) +
         (training && m.dropout ? 4.0 * m.hidden : 0.0);
}

Flops forward_flops_per_token(const ModelSpec& m, int context) {
  double flops = 2 * matmul_parameters_per_token(m);
  if (m.architecture_known) flops += 4.0 * m.layers * context * static_cast<double>(m.heads) * m.head_dim;
  return Flops(flops);
}

int kv_heads_per_rank(const ModelSpec& m, int tensor_parallel) {
  return m.kv_heads >= tensor_parallel ? m.kv_heads / tensor_parallel : 1;
}

Bytes kv_bytes_per_token(const ModelSpec& m, double bytes_per_element, int tensor_parallel, int pipeline_parallel) {
  const int layers_per_stage = (m.layers + pipeline_parallel - 1) / pipeline_parallel;
  const double bytes = 2.0 * layers_per_stage * kv_heads_per_rank(m, tensor_parallel) * m.head_dim * bytes_per_element;
  return Bytes(static_cast<std::int64_t>(std::ceil(bytes)));
}

}  // namespace memtwin
