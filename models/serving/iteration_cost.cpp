#include "models/serving/iteration_cost.h"

#include <algorithm>
#include <cmath>

#include "models/memory/serving_memory.h"
#include "models/model_facts.h"

namespace memtwin {

IterationModel::IterationModel(const Scenario& s) : s_(s) {
  const Inference& inf = *s.inference;
  const ServingMemory memory = serving_memory(s);
  // Every weight is read once per iteration except the embedding tables, of which a lookup reads
  // only the batch's rows (a tied table is read whole as the output head). With pipeline stages
  // the heaviest stage's weights are counted whole.
  const ParameterCount count = count_parameters(s.model);
  const double untouched =
      inf.serving.pipeline_parallel > 1 ? 0.0 : (s.model.tied_embeddings ? 0.0 : count.embedding) + count.position;
  const double per_parameter = inf.weight_dtype == WeightDtype::fp32 ? 4.0 : 2.0;  // embeddings stay unquantised
  weight_bytes_ = memory.weights.as_double() - untouched / inf.serving.tensor_parallel * per_parameter;
  matmul_params_ = matmul_parameters_per_token(s.model);
  attention_width_ = static_cast<double>(s.model.layers) * s.model.heads * s.model.head_dim;
  const auto& flops = s.cluster.gpu.flops;
  // The weights' precision computes (fp32 models on fp32 units), else bf16 tensor cores.
  const Precision compute = inf.weight_dtype == WeightDtype::fp32 && flops.count(Precision::fp32) ? Precision::fp32
                            : flops.count(Precision::bf16)                                       ? Precision::bf16
                                                                                                  : flops.begin()->first;
  peak_flops_ = flops.at(compute).value();
  fp32_flops_ = flops.count(Precision::fp32) ? flops.at(Precision::fp32).value() : peak_flops_ / 8;
  hbm_ = s.cluster.gpu.hbm_bandwidth.value();
  tp_ = inf.serving.tensor_parallel;
  // Our CUDA kernels spend about five instructions per quantised element before the dot product
  // (shift, mask, exact int-to-float, FMA): the reason int4 decode is ALU-bound (README).
  dequant_ops_per_element_ = inf.kv_cache.compression.method == KvCompression::kivi ||
                                     inf.kv_cache.compression.method == KvCompression::int8 ||
                                     inf.kv_cache.compression.method == KvCompression::int4 ||
                                     inf.kv_cache.compression.method == KvCompression::int2
                                 ? 5.0
                                 : 0.0;
  KvShape whole{s.model.layers, s.model.kv_heads, s.model.head_dim, s.inference->kv_cache.dtype == KvDtype::fp8 ? 1.0 : 2.0};
  token_bytes_full_ = whole.token_bytes();
}

double IterationModel::seconds(const IterationLoad& load) const {
  const Efficiency& eff = s_.cluster.efficiency;
  const double tokens = load.prefill_tokens + load.decode_sequences;
  if (tokens == 0) return 0;
  // Work per GPU of the replica (tensor parallel splits it; pipeline stages run one after another,
  // so they do not shorten an iteration).
  const double gemm_flops = 2 * matmul_params_ * tokens / tp_;
  const double attention_flops =
      4 * attention_width_ * (load.prefill_attention + load.decode_context) / tp_ +
      2 * attention_width_ * load.selection_prompt_tokens * 32 / tp_;  // SnapKV-style scoring of a 32-token window
  const double kv_elements = load.kv_bytes_read / 2 / tp_;  // element count at 16-bit equivalence
  const double compute = gemm_flops / (peak_flops_ * eff.gemm) + attention_flops / (peak_flops_ * eff.attention) +
                         dequant_ops_per_element_ * kv_elements / (fp32_flops_ * eff.gemm);
  // The GEMMs read the weights; attention reads the cached KV and prefill writes the new tokens'.
  const double kv_bytes = load.kv_bytes_read / tp_ + load.prefill_tokens * token_bytes_full_ / tp_;
  const double memory = weight_bytes_ / (hbm_ * eff.gemm_memory) + kv_bytes / (hbm_ * eff.memory);
  double comm = 0;
  if (tp_ > 1) {
    // Two ring all-reduces of the hidden states per layer over the intra-node links.
    const double buffer = tokens * s_.model.hidden * 2;
    const double bw = s_.cluster.intra_node.bandwidth.value();
    const double alpha = s_.cluster.intra_node.latency.value();
    comm = 2.0 * s_.model.layers * (2 * (tp_ - 1) / tp_ * buffer / bw + 2 * (tp_ - 1) * alpha);
  }
  return std::max(compute, memory) + comm;
}

double IterationModel::prefill_alone(int prompt_tokens) const {
  IterationLoad load;
  load.prefill_tokens = prompt_tokens;
  load.prefill_attention = prompt_tokens * (prompt_tokens / 2.0);
  return seconds(load);
}

double IterationModel::decode_alone(int context) const {
  IterationLoad load;
  load.decode_sequences = 1;
  load.decode_context = context;
  load.kv_bytes_read = context * token_bytes_full_;
  return seconds(load);
}

}  // namespace memtwin
