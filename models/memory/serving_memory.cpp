#include "models/memory/serving_memory.h"

#include <algorithm>
#include <cmath>

#include "models/kv/kv_method.h"
#include "models/memory/weight_shapes.h"
#include "models/model_facts.h"
#include "models/serving/disaggregation.h"
#include "models/unit_parse.h"

namespace memtwin {
namespace {

// Rounded up, and never below zero.
Bytes ceil_nonnegative_bytes(double b) { return Bytes(static_cast<std::int64_t>(std::ceil(std::max(0.0, b)))); }

double kv_element_bytes(KvDtype d) { return d == KvDtype::fp8 ? 1 : 2; }


// Bytes of the unquantised tensors (embeddings, norms, activations): 16-bit, or 32 for fp32 models.
double dense_element_bytes(WeightDtype dtype) { return dtype == WeightDtype::fp32 ? 4 : 2; }

// Weights of the heaviest pipeline stage on one tensor rank. With expert parallelism a GPU holds
// its share of the experts whole (experts / expert_parallel_size of them) instead of a tensor slice
// of each.
double weight_bytes(const Scenario& s) {
  const ModelSpec& m = s.model;
  const Inference& inf = *s.inference;
  const ParameterCount c = count_parameters(m);
  const double tp = inf.serving.tensor_parallel;
  const double ep = inf.serving.expert_parallel_size();
  const int pp = inf.serving.pipeline_parallel;
  const int stage_layers = (m.layers + pp - 1) / pp;
  double linear = 0;
  for (const auto& w : block_matrices(m)) {
    const bool whole_experts = w.copies > 1 && ep > 1;
    const double split = whole_experts ? ep : tp;
    linear += w.elements() / split * linear_weight_bytes(inf.weight_dtype, inf.weight_group_size, whole_experts ? w.rows : w.rows / tp);
  }
  const double other_per_block = (c.per_layer - [&] {
    double e = 0;
    for (const auto& w : block_matrices(m)) e += w.elements();
    return e;
  }()) / tp;  // biases, norms, router: 16-bit (fp32 when the model runs in fp32)
  const double dense = dense_element_bytes(inf.weight_dtype);
  const double embedding = (c.embedding + c.position) / tp * dense;
  const double head = (m.tied_embeddings ? c.embedding : c.lm_head) / tp * dense + c.final_norm * dense;
  const double blocks = stage_layers * (linear + other_per_block * dense);
  return blocks + (pp == 1 ? embedding + head : std::max(embedding, head));
}

// Peak of vLLM's profiling forward pass with max_num_batched_tokens tokens: the residual stream
// and normed input, the larger of the attention and MLP intermediates, and the sampler's logits
// for max_num_seqs sequences (in the model's precision and fp32).
double profile_activation_bytes(const Scenario& s) {
  const ModelSpec& m = s.model;
  const ServingSpec& sv = s.inference->serving;
  const double tokens = sv.max_num_batched_tokens;
  const double tp = sv.tensor_parallel;
  const double q = static_cast<double>(m.heads) * m.head_dim / tp;
  const double kv = static_cast<double>(kv_heads_per_rank(m, sv.tensor_parallel)) * m.head_dim;
  const bool gated = m.mlp == MlpKind::swiglu || m.mlp == MlpKind::geglu;
  const double inner = m.intermediate * static_cast<double>(m.experts_per_token) / tp;
  const double attention = q + 2 * kv + q;
  const double mlp = gated ? 3 * inner : 2 * inner;
  const double element = dense_element_bytes(s.inference->weight_dtype);
  const double per_token = element * (2 * m.hidden + std::max(attention, mlp));
  const double logits = static_cast<double>(std::min(sv.max_num_seqs, sv.max_num_batched_tokens)) * m.vocab * (element + 4);
  // Expert parallelism gathers every replica's hidden states before the experts and holds the
  // experts' summed outputs before scattering them back (vLLM's all-gather / reduce-scatter
  // dispatch): two tensors of the whole group's tokens.
  const double gathered = sv.expert_parallel_size() > 1 ? 2.0 * sv.replicas * tokens * m.hidden * element : 0.0;
  return tokens * per_token + logits + gathered;
}

}  // namespace

double mean_length(const LengthDistribution& d, double fallback) {
  switch (d.dist) {
    case LengthDist::fixed: return d.value;
    case LengthDist::uniform: return (d.min + d.max) / 2;
    case LengthDist::normal:
    case LengthDist::lognormal: return d.max > 0 ? std::min(d.mean, d.max) : d.mean;
    case LengthDist::empirical: return fallback;
  }
  return fallback;
}

double linear_weight_bytes(WeightDtype dtype, int group_size, double in_features) {
  switch (dtype) {
    case WeightDtype::bf16:
    case WeightDtype::fp16: return 2;
    case WeightDtype::fp32: return 4;
    case WeightDtype::fp8: return 1;                           // per-tensor scale: negligible
    case WeightDtype::int8: return 1 + 4.0 / in_features;      // fp32 scale per output channel
    case WeightDtype::awq_int4: return 0.5 + 2.5 / group_size; // qweight + qzeros + fp16 scales
  }
  return 2;
}

KvShape serving_kv_shape(const Scenario& s) {
  const ModelSpec& m = s.model;
  const ServingSpec& sv = s.inference->serving;
  KvShape shape;
  shape.layers = (m.layers + sv.pipeline_parallel - 1) / sv.pipeline_parallel;
  shape.kv_heads = kv_heads_per_rank(m, sv.tensor_parallel);
  shape.head_dim = m.head_dim;
  shape.element_bytes = kv_element_bytes(s.inference->kv_cache.dtype);
  shape.block_size = sv.block_size;
  return shape;
}

ServingMemory serving_memory(const Scenario& s) {
  if (s.inference->disaggregation) {
    // The decode instances hold the requests' KV caches from their prefill to their last token:
    // their memory is the deployment's capacity; the deployment fits where both sides do.
    ServingMemory decode = serving_memory(instance_scenario(s, InstanceRole::decode));
    decode.fits = decode.fits && serving_memory(instance_scenario(s, InstanceRole::prefill)).fits;
    return decode;
  }
  const Inference& inf = *s.inference;
  const ServingSpec& sv = inf.serving;
  const RuntimeOverheads& rt = s.cluster.runtime;
  ServingMemory out;
  const KvShape shape = serving_kv_shape(s);
  auto compressor = make_kv_compressor(inf.kv_cache.compression, shape);

  out.weights = ceil_nonnegative_bytes(weight_bytes(s));
  out.activations = ceil_nonnegative_bytes(profile_activation_bytes(s));
  const int communicators =
      (sv.tensor_parallel > 1 ? 1 : 0) + (sv.pipeline_parallel > 1 ? 1 : 0) + (sv.expert_parallel_size() > 1 ? 1 : 0);
  out.runtime = rt.cuda_context + rt.framework_overhead + rt.nccl_buffers * communicators;
  out.cuda_graphs = sv.cuda_graphs ? rt.cuda_graph_pool : Bytes(0);
  out.capacity = s.cluster.gpu.memory;
  out.budget = Bytes(static_cast<std::int64_t>(std::floor(sv.gpu_memory_utilization * out.capacity.as_double())));

  const Bytes non_kv = out.weights + out.activations + out.runtime + out.cuda_graphs;
  const Bytes pool = inf.kv_cache.memory ? *inf.kv_cache.memory : out.budget - non_kv;
  out.kv_bytes_per_token_uncompressed = shape.token_bytes();
  out.kv_bytes_per_stored_token = compressor->bytes_per_stored_token();
  out.block_bytes = ceil_nonnegative_bytes(out.kv_bytes_per_stored_token * sv.block_size);
  if (pool.count() > 0) {
    out.kv_pool = pool;
    out.capacity_blocks = pool.count() / out.block_bytes.count();
  }
  out.peak = non_kv + out.kv_pool;

  // Sequences fit in whole blocks; a sequence's footprint is the larger of its prefill and final size.
  auto blocks_for = [&](double prompt, double generated) {
    const auto p = static_cast<std::int64_t>(std::ceil(prompt));
    const auto g = static_cast<std::int64_t>(std::ceil(generated));
    const double bytes = std::max(compressor->prefill_bytes(p), compressor->sequence_bytes(p, g));
    return static_cast<std::int64_t>(std::ceil(bytes / out.block_bytes.as_double()));
  };
  const std::int64_t max_len_blocks = blocks_for(sv.max_model_len, 0);
  if (out.capacity_blocks > 0) out.max_len_sequences = out.capacity_blocks / std::max<std::int64_t>(1, max_len_blocks);
  // Longest prompt that fits alone: bisection over the monotone footprint.
  std::int64_t lo = 0, hi = sv.max_model_len;
  while (lo < hi) {
    const std::int64_t mid = (lo + hi + 1) / 2;
    if (blocks_for(mid, 0) <= out.capacity_blocks) lo = mid; else hi = mid - 1;
  }
  out.max_context_tokens = lo;

  out.typical_prompt = mean_length(inf.workload.prompt_tokens, sv.max_model_len / 2.0);
  out.typical_output = mean_length(inf.workload.output_tokens, 256);
  if (!inf.workload.trace.empty() || !inf.workload.length_pairs.empty()) {
    out.typical_prompt = sv.max_model_len / 2.0;  // the file is read by the simulator; assume half the window
    out.typical_output = 256;
  }
  const auto typical_p = static_cast<std::int64_t>(std::ceil(out.typical_prompt));
  const auto typical_g = static_cast<std::int64_t>(std::ceil(out.typical_output));
  out.kv_bytes_per_token = compressor->sequence_bytes(typical_p, typical_g) / static_cast<double>(typical_p + typical_g);
  if (pool.count() > 0) out.capacity_tokens = static_cast<std::int64_t>(pool.as_double() / out.kv_bytes_per_token);
  // Decoding sequences hold their final footprint; a method that selects after prefill needs the
  // whole prompt for the one sequence being prefilled, so reserve that difference once.
  const double block = out.block_bytes.as_double();
  const auto final_blocks = std::max<std::int64_t>(
      1, static_cast<std::int64_t>(std::ceil(compressor->sequence_bytes(typical_p, typical_g) / block)));
  const auto prefill_extra = std::max<std::int64_t>(0, blocks_for(out.typical_prompt, 0) - final_blocks);
  out.typical_sequences = std::max<std::int64_t>(0, out.capacity_blocks - prefill_extra) / final_blocks;

  const bool explicit_pool = inf.kv_cache.memory.has_value();
  if (pool.count() <= 0) {
    out.why_not = "weights, activations and runtime (" + human_bytes(non_kv) + ") leave no room for a KV cache in " +
                  human_bytes(out.budget) + " (gpu_memory_utilization x memory)";
  } else if (explicit_pool && out.peak > out.capacity) {
    out.why_not = "weights, activations, runtime and the " + human_bytes(pool) + " KV pool need " +
                  human_bytes(out.peak) + " of " + human_bytes(out.capacity);
  } else if (max_len_blocks > out.capacity_blocks) {
    out.why_not = "one sequence of max_model_len " + std::to_string(sv.max_model_len) + " tokens needs " +
                  std::to_string(max_len_blocks) + " KV blocks; the pool has " + std::to_string(out.capacity_blocks) +
                  " (vLLM refuses to start)";
  }
  out.fits = out.why_not.empty();
  return out;
}

std::vector<std::string> serving_fit_hints(const Scenario& s, const ServingMemory& m) {
  std::vector<std::string> hints;
  if (m.fits) return hints;
  const Inference& inf = *s.inference;
  auto consider = [&](const std::string& label, Scenario changed) {
    ServingMemory after = serving_memory(changed);
    hints.push_back(label + ": KV pool " + human_bytes(after.kv_pool) + ", " + std::to_string(after.capacity_tokens) +
                    " tokens" + (after.fits ? " - fits" : ""));
  };
  if (inf.weight_dtype == WeightDtype::bf16 || inf.weight_dtype == WeightDtype::fp16) {
    Scenario c = s;
    c.inference->weight_dtype = WeightDtype::awq_int4;
    c.inference->weight_group_size = 128;
    consider("inference.weights.dtype=awq_int4", c);
  }
  if (!kv_method(inf.kv_cache.compression.method).compresses()) {
    Scenario c = s;
    const KvSuggestion suggestion = kv_compression_to_suggest();
    c.inference->kv_cache.compression = suggestion.spec;
    consider(suggestion.written, c);
  }
  if (s.model.heads % (inf.serving.tensor_parallel * 2) == 0 &&
      inf.serving.tensor_parallel * 2 * inf.serving.replicas <= s.cluster.total_gpus()) {
    Scenario c = s;
    c.inference->serving.tensor_parallel *= 2;
    consider("inference.serving.tensor_parallel=" + std::to_string(c.inference->serving.tensor_parallel), c);
  }
  {
    Scenario c = s;
    c.inference->serving.max_model_len = std::max(256, inf.serving.max_model_len / 2);
    consider("inference.serving.max_model_len=" + std::to_string(c.inference->serving.max_model_len), c);
  }
  return hints;
}

}  // namespace memtwin
