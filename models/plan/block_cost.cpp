#include "models/plan/block_cost.h"

#include "models/memory/activations.h"
#include "models/memory/rank_share.h"
#include "models/memory/weight_shapes.h"
#include "models/model_facts.h"

namespace memtwin {

BlockCost block_cost(const Scenario& s) {
  const ModelSpec& m = s.model;
  const Training& t = *s.training;
  const double tp = t.parallelism.tensor;
  // With context parallelism a rank holds seq_len / context tokens of each sequence: its GEMMs run
  // on them, and its queries attend over the whole (gathered) sequence.
  const double tokens = tokens_per_rank(t);
  const std::int64_t queries = t.seq_len / t.parallelism.context;
  const double element = t.precision == Precision::fp32 ? 4 : 2;
  BlockCost c;
  double weights = 0;
  for (const auto& w : block_matrices(m)) {
    const double active = (w.copies > 1) ? w.rows * w.cols * m.experts_per_token : w.rows * w.cols;
    weights += active / tp;
  }
  c.gemm_flops = 2 * weights * tokens;
  // Column-parallel matrices split their outputs over the tensor ranks, row-parallel ones (the
  // attention output and the MLP's down projection) their inputs, as Megatron-LM does.
  const auto tokens_i = static_cast<std::int64_t>(tokens);
  for (const auto& w : block_matrices(m)) {
    const bool row_parallel = w.name == "o_proj" || w.name == "down_proj";
    const auto rows = static_cast<std::int64_t>(row_parallel ? w.rows / tp : w.rows);
    const auto cols = static_cast<std::int64_t>(row_parallel ? w.cols : w.cols / tp);
    c.gemm_shapes.push_back({tokens_i, cols, rows, w.copies > 1 ? m.experts_per_token : 1});
  }
  // Y[m,n] = X[m,k] W[k,n] costs dX[m,k] = dY W^T (inner n) and dW[k,n] = X^T dY (inner m) backward.
  for (const auto& g : c.gemm_shapes) {
    c.backward_shapes.push_back({g.m, g.k, g.n, g.count});
    c.backward_shapes.push_back({g.k, g.n, g.m, g.count});
  }
  c.gemm_bytes = element * (weights + tokens * (4.0 * m.hidden + 3.0 * m.intermediate * m.experts_per_token / tp));
  const double q_width = static_cast<double>(m.heads) * m.head_dim / tp;
  // Causal FlashAttention: QK^T and AV over half the context on average (Megatron-Core's balanced
  // chunks give every context rank that same half).
  c.attention_flops = 4.0 * tokens * t.seq_len * q_width * 0.5;
  c.attention_bytes = element * tokens * 4 * q_width;
  const std::int64_t head_passes = static_cast<std::int64_t>(t.micro_batch) * m.heads / t.parallelism.tensor;
  c.attention_shapes = {{queries, t.seq_len, m.head_dim, head_passes}, {queries, m.head_dim, t.seq_len, head_passes}};
  c.context_kv_bytes = context_gathered_kv_bytes(m, t);
  if (t.attention == AttentionImpl::explicit_scores) {
    // Materialised scores [b, heads/t, s, s]: written by QK^T, read and written by the fused
    // scale-mask-softmax, by dropout (with its mask), read by AV: about six passes of 16-bit scores.
    const double heads = static_cast<double>(m.heads) / tp;
    const double scores = t.micro_batch * heads * static_cast<double>(t.seq_len) * t.seq_len;
    c.attention_bytes += scores * element * (m.dropout ? 6.0 : 4.0);
    c.attention_flops *= 2;  // no causal skipping: the whole score matrix is computed, then masked
  }
  // Memory-bound kernels of a block, each reading and writing its tensors once.
  const double per_token = block_elementwise_elements_per_token(m, t.parallelism.tensor, true);
  c.elementwise_bytes = element * tokens * per_token;
  c.activation_bytes = block_activation_bytes_per_token(m, t.seq_len, t.parallelism.tensor, t.parallelism.sequence_parallel,
                                                        t.recompute, t.attention) *
                       tokens;
  c.params = rank_share(m, t).block_parameters;
  if (t.parallelism.expert > 1) {
    // Each token's hidden state goes to its top-k experts and comes back (dispatch, combine).
    c.expert_params = count_parameters(m).mlp / t.parallelism.expert / tp;
    c.dispatch_bytes = element * tokens * m.experts_per_token * m.hidden;
  }
  return c;
}

}  // namespace memtwin
