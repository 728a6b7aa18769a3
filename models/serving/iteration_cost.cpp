#include "models/serving/iteration_cost.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "models/comm/collective_model.h"
#include "models/kv/kv_method.h"
#include "models/memory/serving_memory.h"
#include "models/model_facts.h"
#include "models/serving/serving_gemms.h"

namespace memtwin {

namespace {

// A table of rates by working set, interpolated in log(bytes) and held at its ends.
double rate_at(const std::map<double, double>& t, double bytes) {
  auto above = t.lower_bound(bytes);
  if (above == t.begin()) return above->second;
  if (above == t.end()) return std::prev(above)->second;
  const auto below = std::prev(above);
  const double f = std::log(bytes / below->first) / std::log(above->first / below->first);
  return below->second + (above->second - below->second) * f;
}

}  // namespace

IterationModel::IterationModel(const Scenario& s) : s_(s) {
  const Inference& inf = *s.inference;
  const ServingMemory memory = serving_memory(s);
  // Every weight is read once per iteration except the embedding tables, of which a lookup reads
  // only the batch's rows (a tied table is read whole as the output head). With pipeline stages a
  // batch passes every stage in turn: the heaviest stage's weights (one tensor rank's) once per
  // stage, embeddings included.
  const ParameterCount count = count_parameters(s.model);
  const double untouched =
      inf.serving.pipeline_parallel > 1 ? 0.0 : (s.model.tied_embeddings ? 0.0 : count.embedding) + count.position;
  const double per_parameter = inf.weight_dtype == WeightDtype::fp32 ? 4.0 : 2.0;  // embeddings stay unquantised
  weight_bytes_ = memory.weights.as_double() * inf.serving.pipeline_parallel -
                  untouched / inf.serving.tensor_parallel * per_parameter;
  head_params_ = static_cast<double>(s.model.vocab) * s.model.hidden;
  if (s.model.architecture_known) {
    // Each GEMM's weights at the precision the memory model counts them (linear layers quantised,
    // the head not), over every layer: with pipeline stages a batch passes them all in turn.
    double gemm_bytes = 0;
    for (const ServingGemm& g : serving_weight_gemms(s.model, inf.serving.tensor_parallel, inf.serving.expert_parallel_size())) {
      const bool head = g.role == ServingGemm::Role::head;
      const bool unquantised = head || g.role == ServingGemm::Role::router;  // as the memory model counts them
      const double element = unquantised ? per_parameter : linear_weight_bytes(inf.weight_dtype, inf.weight_group_size, g.inner);
      const double bytes = g.elements() * element * (head ? 1.0 : static_cast<double>(g.per_layer) * s.model.layers);
      weight_gemms_.push_back({g.inner, g.outputs, bytes, g.rows_per_token, head, g.group_rows, g.routed()});
      gemm_bytes += bytes;
      if (g.routed()) routed_weight_bytes_ += bytes;
    }
    other_weight_bytes_ = std::max(0.0, weight_bytes_ - gemm_bytes);
  }
  body_params_ = matmul_parameters_per_token(s.model) - head_params_;
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
  ep_ = inf.serving.expert_parallel_size();
  if (ep_ > 1) {
    const bool gated = s.model.mlp == MlpKind::swiglu || s.model.mlp == MlpKind::geglu;
    routed_params_per_token_ = static_cast<double>(s.model.layers) * s.model.experts_per_token * (gated ? 3.0 : 2.0) *
                               static_cast<double>(s.model.hidden) * s.model.intermediate;
  }
  // Dequantising kernels spend about five CUDA-core instructions per quantised element before the
  // dot product (shift, mask, int-to-float, the scale and zero point's FMA): the reason int4 decode
  // is ALU-bound on GPUs with few fp32 units for their bandwidth (README).
  constexpr double kDequantOpsPerElement = 5.0;
  const CompressionSpec& c = inf.kv_cache.compression;
  const KvMethod& method = kv_method(c.method);
  dequant_ops_per_element_ = method.quantizes() ? kDequantOpsPerElement : 0.0;
  // Weight-only int4 (W4A16) GEMMs dequantise every weight on the CUDA cores once per iteration
  // (the batch's rows share a dequantised tile); fp8 and int8 run on tensor cores of their own.
  weight_dequant_ops_ = inf.weight_dtype == WeightDtype::awq_int4 ? kDequantOpsPerElement * body_params_ / tp_ : 0.0;
  selects_after_prefill_ = method.selection == KvSelection::prompt_vote;
  selection_window_ = c.window > 0 ? c.window : 32;
  if (method.selection == KvSelection::accumulated_scores) {
    // Each decode step writes every query head's attention probabilities (fp32), reads them back
    // into the per-KV-head accumulated scores (read and write) and scans the scores for the token
    // to evict; the scores' first read is in the cache bytes already.
    score_upkeep_bytes_per_token_ = 4.0 * s.model.layers * (2.0 * s.model.heads + 3.0 * s.model.kv_heads);
    // The prompt's heavy hitters are its attention's column sums: QK^T once more (flash attention
    // does not return probabilities), half of the prefill attention's FLOPs.
    prompt_score_factor_ = 0.5;
    prompt_scoring_pairs_per_s_ = s.cluster.prompt_scoring_pairs_per_s;
  }
  // An eager engine (no CUDA graphs) makes the GPU wait for the host's dispatch of every layer.
  eager_seconds_ = inf.serving.cuda_graphs ? 0.0 : s.model.layers * s.cluster.runtime.eager_layer_overhead.value();
  KvShape whole{s.model.layers, s.model.kv_heads, s.model.head_dim, s.inference->kv_cache.dtype == KvDtype::fp8 ? 1.0 : 2.0};
  token_bytes_full_ = whole.token_bytes();
  compressor_ = make_kv_compressor(inf.kv_cache.compression, whole);
  kv_elements_per_token_ = 2.0 * s.model.layers * s.model.kv_heads * s.model.head_dim;
  elementwise_bytes_per_token_ = (inf.weight_dtype == WeightDtype::fp32 ? 4.0 : 2.0) * s.model.layers *
                                 block_elementwise_elements_per_token(s.model, 1, false);
  // A measured decode-attention kernel (memtwin calibrate) replaces the roofline for its format.
  const auto& rates = s.cluster.decode_attention_elements_per_s;
  auto rate = rates.find(decode_kernel_format(inf.kv_cache));
  if (rate != rates.end()) decode_kernel_elements_per_s_ = rate->second;
  // The table measured at this model's head_dim where there is one (its per-token work differs).
  auto table_for = [&](const std::string& format) {
    const auto& tables = s.cluster.decode_attention_by_bytes;
    auto table = tables.find(format + "_hd" + std::to_string(s.model.head_dim));
    if (table == tables.end()) table = tables.find(format);
    return table == tables.end() ? std::map<double, double>{} : table->second;
  };
  decode_kernel_by_bytes_ = table_for(decode_kernel_format(inf.kv_cache));
  // Channel-key groups' kernel reads its residual as fp16 vectors and its groups from codes, at
  // rates of their own.
  if (const std::string residual = residual_kernel_format(inf.kv_cache); !residual.empty()) {
    residual_kernel_by_bytes_ = table_for(residual);
  }
  auto write = s.cluster.kv_write_elements_per_s.find(decode_kernel_format(inf.kv_cache));
  if (write != s.cluster.kv_write_elements_per_s.end()) kv_write_elements_per_s_ = write->second;
}

double IterationModel::experts_touched(double tokens) const {
  if (routed_weight_bytes_ <= 0) return 1.0;
  return std::min(1.0, tokens * s_.model.experts_per_token / s_.model.experts);
}

double IterationModel::weight_bytes_read(double tokens) const {
  return weight_bytes_ - routed_weight_bytes_ * (1.0 - experts_touched(tokens));
}

double IterationModel::measured_weight_reads(double tokens, double sampled, double group) const {
  const Efficiency& eff = s_.cluster.efficiency;
  const double touched = experts_touched(group);
  if (!eff.gemm_memory_by_shape.empty() && !weight_gemms_.empty()) {
    double seconds = other_weight_bytes_ / (hbm_ * eff.memory);
    bool measured = true;
    for (const PricedGemm& g : weight_gemms_) {
      const double rows = std::max(1.0, g.head ? sampled : (g.group_rows ? group : tokens) * g.rows_per_token);
      const double fraction = eff.gemm_memory_at(rows, g.inner, g.outputs);
      measured = measured && fraction > 0;  // 0: beyond the measured rows
      if (measured) seconds += g.bytes * (g.routed ? touched : 1.0) / (hbm_ * fraction);
    }
    if (measured) return seconds;
  }
  const double fraction = eff.gemm_memory_at(tokens);
  return fraction > 0 ? weight_bytes_read(group) / (hbm_ * fraction) : 0.0;
}

double IterationModel::compute_seconds(const IterationLoad& load) const { return compute_breakdown(load).total(); }

IterationOpSeconds IterationModel::compute_breakdown(const IterationLoad& load) const {
  const Efficiency& eff = s_.cluster.efficiency;
  const double tokens = load.prefill_tokens + load.decode_sequences;
  IterationOpSeconds out;
  if (tokens == 0) return out;
  // A roofline per kernel class, summed: the kernels of an iteration run one after another, and
  // each is bound by its own resource (the weights' GEMMs by memory in decode, by FLOPs in
  // prefill; decode attention by the cached KV or by dequantising it). Work is per GPU of the
  // replica: tensor parallelism splits it; pipeline stages run one after another, so they do not
  // shorten an iteration.
  // The output head runs for the positions that sample a token, not for every prompt token (vLLM
  // prunes the hidden states to the sampled positions before the head).
  const double sampled = load.decode_sequences + load.prefills_completing;
  // With expert parallelism the routed experts' share of the FLOPs follows the group's tokens, of
  // which this GPU computes 1 / ep of the token-expert pairs.
  const double group = load.expert_group_tokens > 0 ? load.expert_group_tokens : tokens;
  const double gemm_flops = 2 * ((body_params_ - routed_params_per_token_) * tokens + head_params_ * sampled) / tp_ +
                            2 * routed_params_per_token_ * group / ep_;
  const double arithmetic = std::max(gemm_flops / (peak_flops_ * eff.gemm_at(tokens)), weight_dequant_ops_ / (fp32_flops_ * eff.gemm));
  const double weight_reads = weight_bytes_read(group) / (hbm_ * eff.gemm_memory);
  double gemms = eff.gemm_overlap * std::max(arithmetic, weight_reads) + (1 - eff.gemm_overlap) * (arithmetic + weight_reads);
  // Where the GEMMs at this many rows were measured whole from memory, their measured rate: per
  // shape where measured so (the nearest measured shape's), else one rate for all the weights.
  if (const double reads = measured_weight_reads(tokens, sampled, group); reads > 0) {
    gemms = std::max(reads, weight_dequant_ops_ / (fp32_flops_ * eff.gemm));
  }

  const double kv_elements = load.decode_context * kv_elements_per_token_ / tp_;
  double decode_attention = 0;
  if (!decode_kernel_by_bytes_.empty() && kv_elements > 0) {
    // Measured kernel throughput at the iteration's working set, interpolated in log(bytes): a
    // layer's cached K and V are read again one iteration later, after every layer's weights and
    // KV have streamed through the caches, so the bytes that decide whether they are still cached
    // are the weights' and all the KV's, not one layer's.
    const double bytes = std::max(1.0, load.kv_bytes_read / tp_ + weight_bytes_);
    const double residual = residual_kernel_by_bytes_.empty() ? 0.0 : load.decode_residual_context * kv_elements_per_token_ / tp_;
    decode_attention = (kv_elements - residual) / rate_at(decode_kernel_by_bytes_, bytes) +
                       (residual > 0 ? residual / rate_at(residual_kernel_by_bytes_, bytes) : 0.0);
  } else if (decode_kernel_elements_per_s_ > 0) {
    decode_attention = kv_elements / decode_kernel_elements_per_s_;  // measured kernel throughput
  } else {
    const double math = 4 * attention_width_ * load.decode_context / tp_ / (peak_flops_ * eff.attention) +
                        dequant_ops_per_element_ * kv_elements / (fp32_flops_ * eff.gemm);
    decode_attention = std::max(math, load.kv_bytes_read / tp_ / (hbm_ * eff.memory));
  }
  const double prefill_math = 4 * attention_width_ * load.prefill_attention / tp_ / (peak_flops_ * eff.attention);
  const double prefill_attention = std::max(prefill_math, load.prefill_tokens * token_bytes_full_ / tp_ / (hbm_ * eff.memory));
  // A method that accumulates scores scores the prompt once more for its heavy hitters: part of its
  // selection. A measured scoring kernel (memtwin calibrate) prices its pairs; else half the
  // prefill attention's roofline.
  double selection = prompt_scoring_pairs_per_s_ > 0  // set for accumulated scores only
                         ? static_cast<double>(s_.model.layers) * s_.model.heads * load.prefill_attention / tp_ / prompt_scoring_pairs_per_s_
                         : prompt_score_factor_ * prefill_math;
  if (selects_after_prefill_ && load.completed_prompt_tokens > 0) {
    // The window's queries against every prompt key (QK^T), then the kept K and V compacted: the
    // keys read once, the kept bytes read and written.
    const double flops = 2 * attention_width_ * selection_window_ * load.completed_prompt_tokens;
    const double bytes = load.completed_prompt_tokens * token_bytes_full_ / 2 + 2 * load.completed_prompt_kept_bytes;
    selection += std::max(flops / (peak_flops_ * eff.attention), bytes / (hbm_ * eff.memory)) / tp_;
  }
  const double score_upkeep = score_upkeep_bytes_per_token_ * load.decode_context / tp_ / (hbm_ * eff.memory);
  // A measured cache-write kernel (quantising and scattering every new token's K and V) adds its
  // time; without one the written bytes are in prefill attention's memory term above.
  const double kv_write = kv_write_elements_per_s_ > 0 ? tokens * kv_elements_per_token_ / tp_ / kv_write_elements_per_s_ : 0.0;

  const double elementwise = elementwise_bytes_per_token_ * tokens / tp_ / (hbm_ * eff.memory);

  out[IterationOp::weight_gemm] = gemms;
  out[IterationOp::decode_attention] = decode_attention;
  out[IterationOp::prefill_attention] = prefill_attention;
  out[IterationOp::kv_write] = kv_write;
  out[IterationOp::kv_selection] = selection;
  out[IterationOp::score_upkeep] = score_upkeep;
  out[IterationOp::elementwise] = elementwise;
  out[IterationOp::host] = eager_seconds_;
  return out;
}

int IterationModel::tp_all_reduces() const { return tp_ > 1 ? 2 * s_.model.layers : 0; }

double IterationModel::tp_all_reduce_bytes(const IterationLoad& load) const {
  return static_cast<double>(load.prefill_tokens + load.decode_sequences) * s_.model.hidden * 2;
}

// Within one replica the tensor ranks hold the same tokens: its experts' outputs are summed by the
// tensor-parallel all-reduce already, so only a group of several replicas exchanges tokens.
int IterationModel::ep_collectives() const { return lockstep_replicas() > 1 ? s_.model.layers : 0; }

double IterationModel::ep_collective_bytes(int max_replica_tokens) const {
  return static_cast<double>(lockstep_replicas()) * max_replica_tokens * s_.model.hidden * 2;
}

double IterationModel::ep_collective_seconds(int max_replica_tokens) const {
  if (ep_collectives() == 0) return 0;
  // Replica r holds GPUs r*tp .. r*tp + tp - 1, so a group of one tensor rank per replica spans
  // the nodes its replicas' GPUs are on.
  const int replicas = lockstep_replicas();
  const int gpus_per_node = s_.cluster.gpus_per_node;
  const int nodes = std::max(1, (replicas * static_cast<int>(tp_) + gpus_per_node - 1) / gpus_per_node);
  const CollectiveGroup group{replicas, std::min(nodes, replicas)};
  const CollectiveModel collectives(s_.cluster);
  const double bytes = ep_collective_bytes(max_replica_tokens);
  return ep_collectives() * (collectives.cost(Collective::all_gather, group, bytes).time().value() +
                             collectives.cost(Collective::reduce_scatter, group, bytes).time().value());
}

double IterationModel::seconds(const IterationLoad& load) const {
  double comm = 0;
  if (tp_ > 1) {
    // The tensor-parallel group sits inside one node; the collective model prices each call.
    comm = tp_all_reduces() *
           CollectiveModel(s_.cluster).cost(Collective::all_reduce, {static_cast<int>(tp_), 1}, tp_all_reduce_bytes(load)).time().value();
  }
  return compute_seconds(load) + comm + ep_collective_seconds(load.prefill_tokens + load.decode_sequences);
}

double IterationModel::prefill_alone(int prompt_tokens) const {
  IterationLoad load;
  load.prefill_tokens = prompt_tokens;
  load.prefills_completing = 1;
  load.prefill_attention = prompt_tokens * (prompt_tokens / 2.0);
  load.completed_prompt_tokens = prompt_tokens;
  load.completed_prompt_kept_bytes = compressor_->sequence_bytes(prompt_tokens, 0);
  load.expert_group_tokens = prompt_tokens + lockstep_replicas() - 1;  // the others' one-token dummy batches
  return seconds(load);
}

double IterationModel::decode_alone(int context) const {
  IterationLoad load;
  load.decode_sequences = 1;
  load.decode_context = static_cast<double>(compressor_->kept_tokens(context, 0));
  load.kv_bytes_read = compressor_->sequence_bytes(context, 0);
  load.decode_residual_context = static_cast<double>(compressor_->residual_tokens(context, 0));
  load.expert_group_tokens = lockstep_replicas();  // with the others' one-token dummy batches
  return seconds(load);
}

}  // namespace memtwin
