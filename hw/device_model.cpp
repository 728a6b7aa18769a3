#include "hw/device_model.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "hw/kv/channel_key_group_cache.h"
#include "hw/kv/kv_eviction.h"
#include "models/backend.h"
#include "models/kv/kv_method.h"
#include "models/serving/expert_routing.h"

namespace memtwin::hw {

kernels::KvFormat kv_format(const Scenario& s) {
  const CompressionSpec& c = s.inference->kv_cache.compression;
  kernels::KvFormat f;
  f.head_dim = s.model.head_dim;
  f.group = c.group_size;
  const KvMethod& method = kv_method(c.method);
  if (!method.runs_on_devices()) {
    std::string runs;
    for (const KvMethod* m : kv_methods())
      if (m->runs_on_devices()) runs += (runs.empty() ? "" : ", ") + std::string(m->name());
    throw Unsupported("the serving engine runs KV compression " + runs + "; '" + std::string(method.name()) +
                      "' is simulated only (" + method.simulated_only_because + ")");
  }
  switch (method.storage) {
    case KvStorage::vectors:  // 16-bit, or fp8 e4m3 with vLLM's default scale of 1; eviction keeps fewer (hw/kv/kv_eviction.h)
      f.element = s.inference->kv_cache.dtype == KvDtype::fp8 ? kernels::KvElement::fp8 : kernels::KvElement::fp16;
      break;
    // Channel-key groups: the pool is hw/kv/channel_key_group_cache.h's; this is its values' format.
    case KvStorage::channel_key_groups:
    case KvStorage::token_groups:
      f.element = c.bits == 8 ? kernels::KvElement::int8 : c.bits == 4 ? kernels::KvElement::int4 : kernels::KvElement::int2;
      break;
  }
  try {
    f.validate();
  } catch (const std::invalid_argument& e) {
    throw Unsupported(std::string("the KV kernels cannot lay this model out: ") + e.what());
  }
  return f;
}

int iteration_tokens(const ScheduledIteration& it) {
  return static_cast<int>(it.decoding.size()) + std::accumulate(it.chunks.begin(), it.chunks.end(), 0);
}

DeviceModel::DeviceModel(const Scenario& s, const KvCompressor& kv, CachingAllocator& allocator, ServingKernels& kernels,
                         std::int64_t capacity_blocks, std::int64_t weight_bytes, double block_bytes, ServingGroup* group,
                         const RealWeights* real)
    : m_(s.model), allocator_(allocator), kernels_(kernels), group_(group) {
  // The GEMMs the simulator's iteration model prices (models/serving/serving_gemms.h), on one
  // rank: the fused QKV and gate-up matrices; in an expert-parallel group, the rank's experts.
  const int expert_parallel = group_ ? group_->ranks() : 1;
  if (expert_parallel != s.inference->serving.expert_parallel_size()) {
    throw std::logic_error("a serving group of " + std::to_string(expert_parallel) + " ranks for an expert-parallel size of " +
                           std::to_string(s.inference->serving.expert_parallel_size()));
  }
  const std::vector<ServingGemm> gemms = serving_weight_gemms(m_, 1, expert_parallel);
  auto outputs_of = [&](ServingGemm::Role role) {
    return static_cast<int>(std::find_if(gemms.begin(), gemms.end(), [&](const ServingGemm& g) { return g.role == role; })->outputs);
  };
  q_ = m_.heads * m_.head_dim;
  kv_ = m_.kv_heads * m_.head_dim;
  up_ = outputs_of(ServingGemm::Role::gate_up);
  local_experts_ = static_cast<int>(std::find_if(gemms.begin(), gemms.end(), [](const ServingGemm& g) {
                                      return g.role == ServingGemm::Role::gate_up;
                                    })->per_layer);
  if (outputs_of(ServingGemm::Role::qkv) != q_ + 2 * kv_) throw std::logic_error("the fused QKV projection is not q | k | v");
  width_ = std::max(2 * q_ + 2 * kv_, up_ + m_.intermediate);
  std::int64_t floats = 0;
  for (const ServingGemm& g : gemms) floats += g.inner * g.outputs * (g.role == ServingGemm::Role::head ? 1 : m_.layers * g.per_layer);
  // One allocation the size the memory model counts (embeddings and norms included); the
  // matrices the GEMMs read are carved from it.
  if (floats * 4 > weight_bytes) throw std::logic_error("weights larger than the memory model counts");
  weights_ = static_cast<float*>(allocator_.allocate(weight_bytes, "weights"));
  kernels_.fill(weights_, weight_bytes / 4, 0.01f);
  float* w = weights_;
  layers_.resize(static_cast<std::size_t>(m_.layers));
  for (Layer& layer : layers_) {
    for (const ServingGemm& g : gemms) {
      if (g.role == ServingGemm::Role::head) continue;
      layer.matrix[static_cast<int>(g.role)] = w;  // a MoE layer's experts one after another
      w += g.inner * g.outputs * g.per_layer;
    }
  }
  lm_head_ = w;
  if (real) load_real(*real);
  shape_.num_blocks = static_cast<int>(capacity_blocks);
  shape_.block_size = s.inference->serving.block_size;
  shape_.kv_heads = m_.kv_heads;
  shape_.format = kv_format(s);
  global_shape_ = shape_;
  global_shape_.num_blocks = shape_.num_blocks * m_.layers;
  if (kv_method(s.inference->kv_cache.compression.method).storage == KvStorage::channel_key_groups) {
    grouped_keys_ = std::make_unique<ChannelKeyGroupCache>(s, capacity_blocks, block_bytes, kernels_, allocator_);
  } else {
    pool_bytes_ = static_cast<std::int64_t>(shape_.bytes()) * 2 * m_.layers;
    pool_ = static_cast<std::uint8_t*>(allocator_.allocate(pool_bytes_, "kv_cache"));
  }
  eviction_ = std::make_unique<KvEviction>(s, kv, shape_, kernels_, allocator_);
}

DeviceModel::~DeviceModel() {
  eviction_.reset();
  grouped_keys_.reset();
  for (float* t : {norms_, embeddings_})
    if (t) allocator_.release(t);
  if (pool_) allocator_.release(pool_);
  allocator_.release(weights_);
}

std::int64_t DeviceModel::pool_bytes() const {
  return (grouped_keys_ ? grouped_keys_->pool_bytes() : pool_bytes_) + eviction_->score_bytes();
}

void DeviceModel::before_sync(const ScheduledIteration& it, const BlockPool& blocks) {
  if (grouped_keys_) grouped_keys_->stage(it, blocks);
}

void DeviceModel::forward(const ScheduledIteration& it, const BlockPool& blocks, const LayerBlockPool* per_layer,
                          const std::vector<int>& group_rows, TokenStream* token_stream) {
  if (real_ && !token_stream) throw std::logic_error("a real model's forward pass needs its sequences' tokens");
  const int h = m_.hidden, d = m_.head_dim;
  // Synthetic weights run with unit norms, eps 1e-5 and rotary base 10,000; a real model with its own.
  const float eps = real_ ? static_cast<float>(real_->rms_norm_eps) : 1e-5f;
  const double theta = real_ ? real_->rope_theta : 10000.0;
  auto norm_weight = [&](int index) { return real_ ? norms_ + static_cast<std::int64_t>(index) * h : nullptr; };
  const int decodes = static_cast<int>(it.decoding.size());
  int tokens = decodes, outputs = decodes;
  for (std::size_t i = 0; i < it.prefilling.size(); ++i) {
    tokens += it.chunks[i];
    outputs += it.prefilling[i]->prefilled + it.chunks[i] >= it.prefilling[i]->prompt ? 1 : 0;
  }
  // Rotary embedding uses each token's own position: decodes first, then the prefill chunks.
  positions_.clear();
  for (const Sequence* q : it.decoding) positions_.push_back(q->prompt + q->generated - 1);
  for (std::size_t i = 0; i < it.prefilling.size(); ++i)
    for (int t = 0; t < it.chunks[i]; ++t) positions_.push_back(it.prefilling[i]->prefilled + t);
  if (grouped_keys_) grouped_keys_->lay_out(it, blocks);
  else lay_out(it, blocks, per_layer, 0);
  eviction_->begin(it, max_blocks_);

  // Activations as vLLM's profile counts them: the residual stream, the normed input, one
  // intermediate (the larger of attention's and the MLP's), the logits and their probabilities;
  // and the new tokens' K and V, the decodes' queries and attention outputs.
  auto* residual = tensor(4LL * tokens * h, "activations.residual");
  auto* normed = tensor(4LL * tokens * h, "activations.normed");
  auto* inter = tensor(4LL * tokens * width_, "activations.intermediate");
  auto* logits = tensor(8LL * outputs * m_.vocab, "activations.logits");
  auto* k_new = tensor(4LL * tokens * kv_, "activations.k_new");
  auto* v_new = tensor(4LL * tokens * kv_, "activations.v_new");
  auto* query = tensor(4LL * std::max(decodes, 1) * q_, "activations.query");
  auto* attended = tensor(4LL * std::max(decodes, 1) * q_, "activations.attended");
  if (real_) embed(it, *token_stream, residual);
  else kernels_.fill(residual, static_cast<std::int64_t>(tokens) * h, 0.01f);  // the embedded tokens

  for (int l = 0; l < m_.layers; ++l) {
    const Layer& w = layers_[static_cast<std::size_t>(l)];
    if (per_layer && l > 0) lay_out(it, blocks, per_layer, l);
    // The pool holds every layer's K, then every layer's V: a layer's region is addressed from
    // its own base with physical block numbers, or from the first with global layer-block ids.
    const kernels::PagedShape& shape = per_layer ? global_shape_ : shape_;
    std::uint8_t* k_cache = pool_ ? pool_ + shape_.bytes() * static_cast<std::size_t>(per_layer ? 0 : l) : nullptr;
    std::uint8_t* v_cache = pool_ ? pool_ + shape_.bytes() * static_cast<std::size_t>(m_.layers + (per_layer ? 0 : l)) : nullptr;
    // Pre-norm, then the QKV projection into the intermediate rows: [q | k | v | attention
    // output], then rotary position embedding on q and k.
    kernels_.rms_norm(residual, normed, tokens, h, norm_weight(2 * l), eps);
    kernels_.gemm(tokens, q_ + 2 * kv_, h, normed, h, w.qkv(), q_ + 2 * kv_, 0.0f, inter, width_);
    kernels_.rotary(inter, tokens, width_, m_.heads + m_.kv_heads, d, positions_.data(), theta);
    kernels_.copy_rows(inter + q_, width_, k_new, kv_, tokens, kv_);
    kernels_.copy_rows(inter + q_ + kv_, width_, v_new, kv_, tokens, kv_);
    const KvEviction::Step step{l,       k_cache,       v_cache, &shape, &it,    &tables_, max_blocks_, &context_,
                                &prefill_tables_, &slots_, inter, width_};
    if (grouped_keys_) {
      grouped_keys_->append(l, k_new, v_new);
    } else {
      eviction_->before_write(step);
      kernels_.write_paged(k_new, slots_.data(), tokens, shape, k_cache);
      kernels_.write_paged(v_new, slots_.data(), tokens, shape, v_cache);
    }
    if (decodes > 0) {
      kernels_.copy_rows(inter, width_, query, q_, decodes, q_);
      if (grouped_keys_) {
        grouped_keys_->decode_attention(l, query, m_.heads, attended);
      } else {
        auto args = kernels::make_decode_args(query, k_cache, v_cache, tables_.data(), context_.data(), attended, decodes, m_.heads,
                                              max_blocks_, shape);
        args.probs = eviction_->decode_probs();
        args.probs_stride = eviction_->decode_probs_stride();
        kernels_.decode_attention(args);
      }
      kernels_.copy_rows(attended, q_, inter + q_ + 2 * kv_, width_, decodes, q_);
    }
    if (!grouped_keys_) eviction_->after_attention(step);
    // Prefill attention: each chunk's queries against its prefix and itself (causal: half the
    // chunk on average), per head, as the iteration model counts it; a real model's for real.
    if (real_) {
      prompt_attention(it, inter);
    } else {
      for (std::size_t i = 0; i < it.prefilling.size(); ++i) {
        const std::int64_t c = it.chunks[i];
        kernels_.prefill_attention(c, it.prefilling[i]->prefilled + (c + 1) / 2, d, m_.heads);
      }
    }
    // Output projection added to the residual stream (beta 1), then the MLP on its norm.
    kernels_.gemm(tokens, h, q_, inter + q_ + 2 * kv_, width_, w.o(), h, 1.0f, residual, h);
    kernels_.rms_norm(residual, normed, tokens, h, norm_weight(2 * l + 1), eps);
    if (m_.experts > 1) {
      experts(w, normed, residual, tokens, group_rows);
    } else {
      kernels_.gemm(tokens, up_, h, normed, h, w.up(), up_, 0.0f, inter, width_);
      kernels_.activation(inter, tokens, width_, m_.intermediate, up_ > m_.intermediate);
      kernels_.gemm(tokens, h, m_.intermediate, inter + up_, width_, w.down(), h, 1.0f, residual, h);
    }
  }
  // The output head for the tokens that produce one (as many rows as outputs), greedy sampling;
  // a real model's rows are the decodes' and each completing prompt's last, after the final norm.
  if (real_) {
    if (outputs > 0) real_logits(it, residual, inter, normed, logits, *token_stream);
  } else if (outputs > 0) {
    kernels_.gemm(outputs, m_.vocab, h, residual, h, lm_head_, m_.vocab, 0.0f, logits, m_.vocab);
    kernels_.argmax_rows(logits, outputs, m_.vocab, sampled_);
  }
  kernels_.synchronize();
  eviction_->end();
  if (grouped_keys_) grouped_keys_->end();
  for (float* t : {attended, query, v_new, k_new, logits, inter, normed, residual}) allocator_.release(t);
}

// A MoE layer: the router's logits, then each expert's gate-up GEMM, activation and down GEMM
// over the tokens routed to it, added into the residual stream. The weights are synthetic, so
// their logits carry no routing: tokens are routed the balanced way the iteration model assumes
// (models/serving/expert_routing.h), an expert's tokens read and its outputs added as strided
// runs of rows; experts without tokens are skipped, as a fused MoE kernel skips them.
void DeviceModel::experts(const Layer& w, const float* normed, float* residual, int tokens, const std::vector<int>& group_rows) {
  const int h = m_.hidden, e_count = m_.experts, k = m_.experts_per_token, inter = m_.intermediate;
  const int mid_width = up_ + inter;  // [gate | up | activated] per routed row
  // The router runs on this rank's tokens; under expert parallelism its experts then take every
  // rank's tokens (all-gathered), and their outputs go back to each token's rank (reduce-scattered).
  auto* logits = tensor(4LL * tokens * e_count, "activations.router_logits");
  kernels_.gemm(tokens, e_count, h, normed, h, w.router(), e_count, 0.0f, logits, e_count);
  const int routed = group_ ? std::accumulate(group_rows.begin(), group_rows.end(), 0) : tokens;
  const int first_expert = group_ ? group_->rank() * local_experts_ : 0;
  const float* in = normed;
  float* out = residual;
  float* gathered_in = nullptr;
  float* gathered_out = nullptr;
  if (group_) {
    gathered_in = tensor(4LL * routed * h, "activations.gathered_hidden");
    gathered_out = tensor(4LL * routed * h, "activations.gathered_expert_out");
    group_->all_gather_rows(normed, gathered_in, group_rows, h);
    kernels_.fill(gathered_out, static_cast<std::int64_t>(routed) * h, 0.0f);
    in = gathered_in;
    out = gathered_out;
  }
  std::vector<std::vector<ExpertRun>> runs(static_cast<std::size_t>(local_experts_));
  int most = 0;
  for (int local = 0; local < local_experts_; ++local) {
    runs[static_cast<std::size_t>(local)] = expert_runs(routed, e_count, k, first_expert + local);
    int rows = 0;
    for (const ExpertRun& run : runs[static_cast<std::size_t>(local)]) rows += run.count;
    most = std::max(most, rows);
  }
  auto* rows_in = tensor(4LL * std::max(most, 1) * h, "activations.expert_rows");
  auto* mid = tensor(4LL * std::max(most, 1) * mid_width, "activations.expert_intermediate");
  const std::int64_t up_elements = static_cast<std::int64_t>(h) * up_, down_elements = static_cast<std::int64_t>(inter) * h;
  for (int local = 0; local < local_experts_; ++local) {
    const auto& expert = runs[static_cast<std::size_t>(local)];
    if (expert.empty()) continue;
    int rows = 0;
    for (const ExpertRun& run : expert) {  // gather the rows routed to this expert
      kernels_.copy_rows(in + static_cast<std::int64_t>(run.first) * h, run.stride * h, rows_in + static_cast<std::int64_t>(rows) * h, h,
                         run.count, h);
      rows += run.count;
    }
    kernels_.gemm(rows, up_, h, rows_in, h, w.up() + local * up_elements, up_, 0.0f, mid, mid_width);
    kernels_.activation(mid, rows, mid_width, inter, up_ > inter);
    rows = 0;
    for (const ExpertRun& run : expert) {  // each run's outputs added to its tokens' rows
      kernels_.gemm(run.count, h, inter, mid + static_cast<std::int64_t>(rows) * mid_width + up_, mid_width, w.down() + local * down_elements,
                    h, 1.0f, out + static_cast<std::int64_t>(run.first) * h, run.stride * h);
      rows += run.count;
    }
  }
  if (group_) {
    kernels_.synchronize();  // the exchange reads what the experts wrote
    group_->reduce_scatter_add(gathered_out, residual, group_rows, h);
    for (float* t : {gathered_out, gathered_in}) allocator_.release(t);
  }
  for (float* t : {mid, rows_in, logits}) allocator_.release(t);
}

void DeviceModel::idle_forward(const std::vector<int>& group_rows) {
  if (!group_) throw std::logic_error("an idle forward pass outside an expert-parallel group");
  const int h = m_.hidden;
  auto* residual = tensor(4LL * h, "activations.residual");
  auto* normed = tensor(4LL * h, "activations.normed");
  kernels_.fill(residual, h, 0.0f);
  for (int l = 0; l < m_.layers; ++l) {
    kernels_.rms_norm(residual, normed, 1, h, nullptr, 1e-5f);
    experts(layers_[static_cast<std::size_t>(l)], normed, residual, 1, group_rows);
  }
  kernels_.synchronize();
  for (float* t : {normed, residual}) allocator_.release(t);
}

// Layer `layer`'s metadata for the kernels: where each new token's K and V go (decodes, then the
// prefill chunks), the decodes' block tables and cached lengths, the prefilling sequences' tables.
void DeviceModel::lay_out(const ScheduledIteration& it, const BlockPool& blocks, const LayerBlockPool* per_layer, int layer) {
  auto table_of = [&](const Sequence& q) { return per_layer ? per_layer->table(q, layer) : blocks.table(q); };
  slots_.clear();
  auto place = [&](const Sequence& q, const std::vector<std::int32_t>& table, int position) {
    const int index = eviction_->index(q, position, layer);
    slots_.push_back(static_cast<std::int64_t>(table.at(static_cast<std::size_t>(index / shape_.block_size))) *
                         shape_.block_size +
                     index % shape_.block_size);
  };
  decode_tables_.clear();
  for (const Sequence* q : it.decoding) {
    decode_tables_.push_back(table_of(*q));
    place(*q, decode_tables_.back(), q->prompt + q->generated - 1);
  }
  prefill_tables_.clear();
  for (std::size_t i = 0; i < it.prefilling.size(); ++i) {
    prefill_tables_.push_back(table_of(*it.prefilling[i]));
    for (int t = 0; t < it.chunks[i]; ++t) place(*it.prefilling[i], prefill_tables_.back(), it.prefilling[i]->prefilled + t);
  }
  max_blocks_ = 1;
  for (const auto& t : decode_tables_) max_blocks_ = std::max(max_blocks_, static_cast<int>(t.size()));
  const std::size_t decodes = it.decoding.size();
  tables_.assign(decodes * static_cast<std::size_t>(max_blocks_), 0);
  context_.assign(decodes, 0);
  for (std::size_t i = 0; i < decodes; ++i) {
    std::copy(decode_tables_[i].begin(), decode_tables_[i].end(), tables_.begin() + static_cast<long>(i) * max_blocks_);
    context_[i] = eviction_->cached(*it.decoding[i], layer);
  }
}

}  // namespace memtwin::hw
