#include "hw/serving_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <memory>
#include <optional>
#include <stdexcept>

#include "hw/block_pool.h"
#include "hw/kivi_cache.h"
#include "hw/kv_eviction.h"
#include "hw/timed_serving_kernels.h"
#include "kernels/kv_kernels.h"
#include "models/backend.h"
#include "models/memory/serving_memory.h"
#include "models/serving/batch_scheduler.h"
#include "models/serving/request_stream.h"
#include "models/serving/serving_gemms.h"

namespace memtwin::hw {
namespace {

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
    case KvStorage::vectors:  // 16-bit, or fp8 e4m3 with vLLM's default scale of 1; eviction keeps fewer (hw/kv_eviction.h)
      f.element = s.inference->kv_cache.dtype == KvDtype::fp8 ? kernels::KvElement::fp8 : kernels::KvElement::fp16;
      break;
    case KvStorage::channel_key_groups:  // the pool is KiviCache's (hw/kivi_cache.h); this is its values' format
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

// The model's tensors and one iteration's forward pass, on the device's kernels.
class DeviceModel {
 public:
  DeviceModel(const Scenario& s, const KvCompressor& kv, CachingAllocator& allocator, ServingKernels& kernels,
              std::int64_t capacity_blocks, std::int64_t weight_bytes, double block_bytes)
      : m_(s.model), allocator_(allocator), kernels_(kernels) {
    // The GEMMs the simulator's iteration model prices (models/serving/serving_gemms.h), on one
    // rank: the fused QKV and gate-up matrices.
    const std::vector<ServingGemm> gemms = serving_weight_gemms(m_, 1, 1);
    auto outputs_of = [&](ServingGemm::Role role) {
      return static_cast<int>(std::find_if(gemms.begin(), gemms.end(), [&](const ServingGemm& g) { return g.role == role; })->outputs);
    };
    q_ = m_.heads * m_.head_dim;
    kv_ = m_.kv_heads * m_.head_dim;
    up_ = outputs_of(ServingGemm::Role::gate_up);
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
    shape_.num_blocks = static_cast<int>(capacity_blocks);
    shape_.block_size = s.inference->serving.block_size;
    shape_.kv_heads = m_.kv_heads;
    shape_.format = kv_format(s);
    global_shape_ = shape_;
    global_shape_.num_blocks = shape_.num_blocks * m_.layers;
    if (kv_method(s.inference->kv_cache.compression.method).storage == KvStorage::channel_key_groups) {
      kivi_ = std::make_unique<KiviCache>(s, capacity_blocks, block_bytes, kernels_, allocator_);
    } else {
      pool_bytes_ = static_cast<std::int64_t>(shape_.bytes()) * 2 * m_.layers;
      pool_ = static_cast<std::uint8_t*>(allocator_.allocate(pool_bytes_, "kv_cache"));
    }
    eviction_ = std::make_unique<KvEviction>(s, kv, shape_, kernels_, allocator_);
  }
  ~DeviceModel() {
    eviction_.reset();
    kivi_.reset();
    if (pool_) allocator_.release(pool_);
    allocator_.release(weights_);
  }
  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;
  /// K and V, and H2O's scores.
  [[nodiscard]] std::int64_t pool_bytes() const {
    return (kivi_ ? kivi_->pool_bytes() : pool_bytes_) + eviction_->score_bytes();
  }
  /// KIVI: before the blocks are synced, the residuals this iteration quantises (hw/kivi_cache.h).
  void before_sync(const ScheduledIteration& it, const BlockPool& blocks) {
    if (kivi_) kivi_->stage(it, blocks);
  }

  /// One iteration; `per_layer` holds the blocks of methods whose layers keep different numbers
  /// of tokens (each layer's table of global layer-block ids), else every layer uses `blocks`.
  void forward(const ScheduledIteration& it, const BlockPool& blocks, const LayerBlockPool* per_layer) {
    const int h = m_.hidden, d = m_.head_dim;
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
    if (kivi_) kivi_->lay_out(it, blocks);
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
    kernels_.fill(residual, static_cast<std::int64_t>(tokens) * h, 0.01f);  // the embedded tokens

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
      kernels_.rms_norm(residual, normed, tokens, h);
      kernels_.gemm(tokens, q_ + 2 * kv_, h, normed, h, w.qkv(), q_ + 2 * kv_, 0.0f, inter, width_);
      kernels_.rotary(inter, tokens, width_, m_.heads + m_.kv_heads, d, positions_.data());
      kernels_.copy_rows(inter + q_, width_, k_new, kv_, tokens, kv_);
      kernels_.copy_rows(inter + q_ + kv_, width_, v_new, kv_, tokens, kv_);
      const KvEviction::Step step{l,       k_cache,       v_cache, &shape, &it,    &tables_, max_blocks_, &context_,
                                  &prefill_tables_, &slots_, inter, width_};
      if (kivi_) {
        kivi_->append(l, k_new, v_new);
      } else {
        eviction_->before_write(step);
        kernels_.write_paged(k_new, slots_.data(), tokens, shape, k_cache);
        kernels_.write_paged(v_new, slots_.data(), tokens, shape, v_cache);
      }
      if (decodes > 0) {
        kernels_.copy_rows(inter, width_, query, q_, decodes, q_);
        if (kivi_) {
          kivi_->decode_attention(l, query, m_.heads, attended);
        } else {
          auto args = kernels::make_decode_args(query, k_cache, v_cache, tables_.data(), context_.data(), attended, decodes, m_.heads,
                                                max_blocks_, shape);
          args.probs = eviction_->decode_probs();
          args.probs_stride = eviction_->decode_probs_stride();
          kernels_.decode_attention(args);
        }
        kernels_.copy_rows(attended, q_, inter + q_ + 2 * kv_, width_, decodes, q_);
      }
      if (!kivi_) eviction_->after_attention(step);
      // Prefill attention: each chunk's queries against its prefix and itself (causal: half the
      // chunk on average), per head, as the iteration model counts it.
      for (std::size_t i = 0; i < it.prefilling.size(); ++i) {
        const std::int64_t c = it.chunks[i];
        kernels_.prefill_attention(c, it.prefilling[i]->prefilled + (c + 1) / 2, d, m_.heads);
      }
      // Output projection added to the residual stream (beta 1), then the MLP on its norm.
      kernels_.gemm(tokens, h, q_, inter + q_ + 2 * kv_, width_, w.o(), h, 1.0f, residual, h);
      kernels_.rms_norm(residual, normed, tokens, h);
      if (m_.experts > 1) {
        experts(w, normed, residual, tokens);
      } else {
        kernels_.gemm(tokens, up_, h, normed, h, w.up(), up_, 0.0f, inter, width_);
        kernels_.activation(inter, tokens, width_, m_.intermediate, up_ > m_.intermediate);
        kernels_.gemm(tokens, h, m_.intermediate, inter + up_, width_, w.down(), h, 1.0f, residual, h);
      }
    }
    // The output head for the tokens that produce one (as many rows as outputs), greedy sampling.
    if (outputs > 0) {
      kernels_.gemm(outputs, m_.vocab, h, residual, h, lm_head_, m_.vocab, 0.0f, logits, m_.vocab);
      kernels_.argmax_rows(logits, outputs, m_.vocab, sampled_);
    }
    kernels_.synchronize();
    eviction_->end();
    if (kivi_) kivi_->end();
    for (float* t : {attended, query, v_new, k_new, logits, inter, normed, residual}) allocator_.release(t);
  }

 private:
  float* tensor(std::int64_t bytes, const char* what) { return static_cast<float*>(allocator_.allocate(bytes, what)); }
  struct Layer;

  // A MoE layer: the router's logits, then each expert's gate-up GEMM, activation and down GEMM
  // over the tokens routed to it, added into the residual stream. The weights are synthetic, so
  // their logits carry no routing: tokens are routed the balanced way the iteration model assumes
  // (a trained router's load balancing aims for it). Token t's first expert is t x experts /
  // tokens, its j-th that plus j x (experts / top-k), so an expert's tokens are top-k contiguous
  // runs, each token's experts are distinct, and each expert gets tokens x top-k / experts of them
  // (a token for each of top-k experts when there are fewer tokens than experts; the others are
  // skipped, as a fused MoE kernel skips experts without tokens).
  void experts(const Layer& w, const float* normed, float* residual, int tokens) {
    const int h = m_.hidden, e_count = m_.experts, k = m_.experts_per_token, inter = m_.intermediate;
    const int stride = std::max(1, e_count / k);
    const int mid_width = up_ + inter;  // [gate | up | activated] per routed row
    auto first_of = [&](int expert) {  // the first token whose first expert is `expert`
      return static_cast<int>((static_cast<std::int64_t>(expert) * tokens + e_count - 1) / e_count);
    };
    // The run of tokens routed to expert e as their j-th choice: those whose first expert is j
    // strides before e.
    struct Run {
      int from, count;
    };
    auto run_of = [&](int e, int j) {
      const int primary = ((e - j * stride) % e_count + e_count) % e_count;
      return Run{first_of(primary), first_of(primary + 1) - first_of(primary)};
    };
    int most = 0;
    for (int e = 0; e < e_count; ++e) {
      int rows = 0;
      for (int j = 0; j < k; ++j) rows += run_of(e, j).count;
      most = std::max(most, rows);
    }
    auto* logits = tensor(4LL * tokens * e_count, "activations.router_logits");
    auto* rows_in = tensor(4LL * std::max(most, 1) * h, "activations.expert_rows");
    auto* mid = tensor(4LL * std::max(most, 1) * mid_width, "activations.expert_intermediate");
    kernels_.gemm(tokens, e_count, h, normed, h, w.router(), e_count, 0.0f, logits, e_count);
    const std::int64_t up_elements = static_cast<std::int64_t>(h) * up_, down_elements = static_cast<std::int64_t>(inter) * h;
    for (int e = 0; e < e_count; ++e) {
      int rows = 0;
      for (int j = 0; j < k; ++j) {  // gather the runs routed to e
        const auto [from, count] = run_of(e, j);
        if (count > 0) kernels_.copy_rows(normed + static_cast<std::int64_t>(from) * h, h, rows_in + static_cast<std::int64_t>(rows) * h, h, count, h);
        rows += count;
      }
      if (rows == 0) continue;
      kernels_.gemm(rows, up_, h, rows_in, h, w.up() + e * up_elements, up_, 0.0f, mid, mid_width);
      kernels_.activation(mid, rows, mid_width, inter, up_ > inter);
      rows = 0;
      for (int j = 0; j < k; ++j) {  // each run's outputs added to its tokens' residual rows
        const auto [from, count] = run_of(e, j);
        if (count > 0) {
          kernels_.gemm(count, h, inter, mid + static_cast<std::int64_t>(rows) * mid_width + up_, mid_width,
                        w.down() + e * down_elements, h, 1.0f, residual + static_cast<std::int64_t>(from) * h, h);
        }
        rows += count;
      }
    }
    for (float* t : {mid, rows_in, logits}) allocator_.release(t);
  }

  // Layer `layer`'s metadata for the kernels: where each new token's K and V go (decodes, then the
  // prefill chunks), the decodes' block tables and cached lengths, the prefilling sequences' tables.
  void lay_out(const ScheduledIteration& it, const BlockPool& blocks, const LayerBlockPool* per_layer, int layer) {
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

  struct Layer {
    float* matrix[static_cast<int>(ServingGemm::Role::count)] = {};  // by ServingGemm::Role (a MoE layer's experts in a row)
    [[nodiscard]] const float* router() const { return matrix[static_cast<int>(ServingGemm::Role::router)]; }
    [[nodiscard]] const float* qkv() const { return matrix[static_cast<int>(ServingGemm::Role::qkv)]; }
    [[nodiscard]] const float* o() const { return matrix[static_cast<int>(ServingGemm::Role::attention_out)]; }
    [[nodiscard]] const float* up() const { return matrix[static_cast<int>(ServingGemm::Role::gate_up)]; }
    [[nodiscard]] const float* down() const { return matrix[static_cast<int>(ServingGemm::Role::down)]; }
  };
  const ModelSpec& m_;
  CachingAllocator& allocator_;
  ServingKernels& kernels_;
  int q_ = 0, kv_ = 0, up_ = 0, width_ = 0;
  float* weights_ = nullptr;
  float* lm_head_ = nullptr;
  std::vector<Layer> layers_;
  kernels::PagedShape shape_;
  std::uint8_t* pool_ = nullptr;
  std::int64_t pool_bytes_ = 0;
  std::vector<std::int64_t> slots_;
  std::vector<std::int32_t> positions_;
  std::vector<std::int32_t> tables_, context_;
  std::vector<std::vector<std::int32_t>> decode_tables_, prefill_tables_;
  int max_blocks_ = 1;
  kernels::PagedShape global_shape_;  // every layer's region as one pool of layer blocks
  std::unique_ptr<KvEviction> eviction_;  // where tokens live; H2O's and SnapKV's scores
  std::unique_ptr<KiviCache> kivi_;       // KIVI's pool and kernels, instead of pool_
  std::vector<int> sampled_;
};

}  // namespace

void require_serving_support(const Scenario& s) {
  const Inference& inf = *s.inference;
  if (inf.serving.replicas != 1 || inf.serving.tensor_parallel != 1 || inf.serving.pipeline_parallel != 1) {
    throw Unsupported("the serving engine runs one replica without tensor or pipeline parallelism");
  }
  if (inf.weight_dtype != WeightDtype::fp32) {
    throw Unsupported("the serving engine computes in fp32 (sgemm): set inference.weights.dtype: fp32");
  }
  if (inf.tiers.nvme) throw Unsupported("the NVMe tier (inference.tiers.nvme) is simulated only; the host tier runs");
  if (!s.model.architecture_known) throw Unsupported("serving on a device needs the model's architecture");
  kv_format(s);
  if (kv_method(inf.kv_cache.compression.method).storage == KvStorage::channel_key_groups) kivi_paged_shape(s, 1);
}

ServingMeasurement serve_on_device(const Scenario& s, ServingDevice& device) {
  require_serving_support(s);
  if (kv_method(s.inference->kv_cache.compression.method).scores_tokens() && !device.kernels->supports_score_eviction()) {
    throw Unsupported("H2O and SnapKV run on --device host: this device has no attention-probability and eviction kernels yet");
  }
  using Clock = std::chrono::steady_clock;
  const Inference& inf = *s.inference;
  const ServingMemory memory = serving_memory(s);
  CachingAllocator allocator(s.cluster.gpu.memory.count(), device.memory.raw);
  ServingMeasurement out;
  out.runtime_bytes = device.memory.in_use();
  device.memory.reset_peak();
  out.run = start_serving_run(generate_requests(inf, s.seed));
  ServingRun& run = out.run;
  run.capacity_blocks = memory.capacity_blocks;
  // Every op is recorded (the plan hash says what ran); where the device's calls can be timed one by
  // one, each kind of work is (validate compares each with what the simulator priced), and the
  // host's share is what a forward pass spends outside them.
  TimedServingKernels timed(*device.kernels, run.op_seconds, run.executed_ops);
  ServingKernels& kernels = timed;
  try {
    const auto kv = make_kv_compressor(inf.kv_cache.compression, serving_kv_shape(s));
    DeviceModel model(s, *kv, allocator, kernels, memory.capacity_blocks, memory.weights.count(),
                      memory.block_bytes.as_double());
    out.weights_bytes = memory.weights.count();
    out.kv_pool_bytes = model.pool_bytes();
    BatchScheduler scheduler(0, s, *kv, run, memory.capacity_blocks, memory.block_bytes.as_double());
    BlockPool blocks(memory.capacity_blocks, run);
    std::optional<LayerBlockPool> layer_blocks;  // PyramidKV: each layer keeps its own number of tokens
    if (kv_method(inf.kv_cache.compression.method).per_layer_budgets) {
      layer_blocks.emplace(memory.capacity_blocks, s.model.layers, *kv, inf.serving.block_size);
    }

    const bool closed_loop = inf.workload.arrival == Arrival::closed_loop && inf.workload.trace.empty();
    const std::size_t total = run.requests.size();
    std::size_t next = 0, finished = 0;
    const auto t0 = Clock::now();
    auto now = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
    auto admit = [&](std::size_t record, double at) {
      run.requests[record].arrival_s = at;
      scheduler.enqueue(record, run.requests[record].prompt_tokens);
    };
    scheduler.on_finish = [&](std::size_t) {
      ++finished;
      if (closed_loop && next < total) admit(next++, now());
    };
    if (closed_loop) {
      while (next < std::min<std::size_t>(static_cast<std::size_t>(inf.workload.concurrency), total)) admit(next++, 0.0);
    }
    while (finished < total) {
      if (!closed_loop) {
        // Release what has arrived, at its own arrival time: it waited from then.
        while (next < total && run.requests[next].arrival_s <= now()) admit(next, run.requests[next].arrival_s), ++next;
      }
      auto it = scheduler.schedule();
      if (!it) {
        if (closed_loop || next >= total) throw std::logic_error("serving engine: requests outstanding but none can run");
        std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, run.requests[next].arrival_s - now())));
        continue;
      }
      model.before_sync(*it, blocks);
      if (layer_blocks) layer_blocks->sync(scheduler.running());
      else blocks.sync(scheduler.running(), scheduler.cached_prefix_blocks());
      const double started = now();
      // Swaps and the host tier's prefix traffic cross the host link before the iteration.
      const double moved = it->swap_out_bytes + it->swap_in_bytes + it->tier.gpu_to_host + it->tier.host_to_gpu;
      if (moved > 0) device.kernels->swap(static_cast<std::int64_t>(moved));
      const double in_kernels = timed.kernel_seconds(), forward_began = now();
      model.forward(*it, blocks, layer_blocks ? &*layer_blocks : nullptr);
      if (timed.timing()) run.op_seconds[IterationOp::host] += (now() - forward_began) - (timed.kernel_seconds() - in_kernels);
      scheduler.complete(*it, started, now());
    }
    run.makespan_s = now();
    run.last_arrival_s = closed_loop || total == 0 ? run.makespan_s : run.requests.back().arrival_s;
  } catch (const DeviceOutOfMemory& e) {
    out.oom = e;
    out.iterations_done = run.iterations;
  }
  out.allocator = allocator.stats();
  out.peak_bytes = device.memory.peak();
  return out;
}

}  // namespace memtwin::hw
