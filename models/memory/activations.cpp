#include "models/memory/activations.h"

#include <algorithm>
#include <cmath>

#include "models/model_facts.h"

namespace memtwin {

double block_activation_bytes_per_token(const ModelSpec& m, int context, int tp, bool sp, Recompute recompute,
                                        AttentionImpl attention) {
  const double h = m.hidden;
  const double q = static_cast<double>(m.heads) * m.head_dim;
  const double kv = static_cast<double>(m.kv_heads) * m.head_dim;
  const double mask = m.dropout ? 1.0 : 0.0;
  const bool gated = m.mlp == MlpKind::swiglu || m.mlp == MlpKind::geglu;

  if (recompute == Recompute::full) return 2 * h / (sp ? tp : 1);  // only the block's input

  // Terms every tensor rank holds whole unless sequence parallelism splits them (Korthikanti's
  // "10 sbh"): two norm inputs (2+2), QKV input (2), MLP input (2), two dropout masks (1+1).
  const double replicated = 4 * h + 2 * h + 2 * h + 2 * mask * h;
  // Terms tensor parallelism splits (GPT: "24 sbh"): Q and K for QK^T (2q + 2kv), V (2kv), the
  // output projection's input (2q), and the MLP's inner activations. A GeLU MLP keeps the GeLU input
  // and the second matmul's input (2I + 2I); a gated MLP keeps gate and up outputs and the product
  // (fused SwiGLU recomputes the activation itself: 6I). MoE: each token's top-k experts.
  const double mlp_inner = (gated ? 6.0 : 4.0) * m.intermediate * m.experts_per_token;
  const double split = 2 * q + 2 * kv + 2 * kv + 2 * q + mlp_inner;
  double bytes = replicated / (sp ? tp : 1) + split / tp;
  // Explicit attention keeps softmax output (2), its dropout mask (1) and dropout output (2) per
  // score: 5as per token ("5as/h" of sbh). FlashAttention recomputes them; so does selective recompute.
  if (attention == AttentionImpl::explicit_scores && recompute == Recompute::none) {
    const double per_score = m.dropout ? 5.0 : 2.0;  // without dropout only the softmax output remains
    bytes += per_score * m.heads * static_cast<double>(context) / tp;
  }
  return bytes;
}

double context_gathered_kv_bytes(const ModelSpec& m, const Training& t) {
  if (t.parallelism.context == 1 || !m.architecture_known) return 0;
  const double element = t.precision == Precision::fp32 ? 4 : 2;
  return 2.0 * static_cast<double>(t.seq_len) * t.micro_batch * kv_heads_per_rank(m, t.parallelism.tensor) * m.head_dim *
         element;
}

ActivationMemory training_activations(const Scenario& s, const RankShare& share) {
  ActivationMemory out;
  const Training& t = *s.training;
  const ModelSpec& m = s.model;
  if (!m.architecture_known) return out;
  const int tp = t.parallelism.tensor;
  const bool sp = t.parallelism.sequence_parallel;
  const double tokens = tokens_per_rank(t);
  const int pp = t.parallelism.pipeline;
  const int microbatches = t.global_batch / (t.micro_batch * batch_shards(s.cluster, t));

  // Micro-batches whose activations the first stage holds at once: 1F1B keeps p in flight
  // (Korthikanti: the first stage holds L layers' worth), interleaving adds (p-1)/(p m), GPipe all.
  double in_flight = 1;
  if (pp > 1) {
    if (t.parallelism.schedule == PipelineSchedule::gpipe) {
      in_flight = microbatches;
    } else {
      in_flight = std::min(pp, microbatches);
      if (t.parallelism.schedule == PipelineSchedule::interleaved) {
        in_flight *= 1.0 + (pp - 1.0) / (pp * t.parallelism.interleave);
      }
    }
  }
  out.in_flight_microbatches = static_cast<int>(std::ceil(in_flight));
  const double per_block = block_activation_bytes_per_token(m, t.seq_len, tp, sp, t.recompute, t.attention);
  out.stored = Bytes(static_cast<std::int64_t>(std::ceil(per_block * tokens * share.stage_layers * in_flight)));

  // Working set: with full recompute one block's activations are rebuilt during backward; and the
  // stage with the output layer holds the logits (16-bit) and their fp32 copy for the loss
  // (Korthikanti: 4sbv, split over tensor ranks), plus the final norm's input.
  double working = 0;
  if (t.recompute == Recompute::full) {
    working += block_activation_bytes_per_token(m, t.seq_len, tp, sp, Recompute::none, t.attention) * tokens;
  } else if (t.recompute == Recompute::selective && t.attention == AttentionImpl::explicit_scores) {
    working += (m.dropout ? 5.0 : 2.0) * m.heads * static_cast<double>(t.seq_len) / tp * tokens;
  }
  if (share.has_output_layer) working += tokens * (6.0 * m.vocab / tp + 4.0 * m.hidden);
  // Context parallelism: one block's keys and values of the whole sequence, gathered for attention.
  working += context_gathered_kv_bytes(m, t);
  out.working = Bytes(static_cast<std::int64_t>(std::ceil(working)));
  return out;
}

}  // namespace memtwin
