#include "hw/host/serving_engine.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <unordered_map>

#include "hw/host/host_kernels.h"
#include "hw/process_memory.h"
#include "kernels/kv_kernels.h"
#include "models/backend.h"
#include "models/memory/serving_memory.h"
#include "models/serving/batch_scheduler.h"
#include "models/serving/request_stream.h"

namespace memtwin::hw {
namespace {

kernels::KvFormat kv_format(const Scenario& s) {
  const CompressionSpec& c = s.inference->kv_cache.compression;
  kernels::KvFormat f;
  f.head_dim = s.model.head_dim;
  f.group = c.group_size;
  switch (c.method) {
    case KvCompression::none:  // 16-bit, or fp8 e4m3 with vLLM's default scale of 1
      f.element = s.inference->kv_cache.dtype == KvDtype::fp8 ? kernels::KvElement::fp8 : kernels::KvElement::fp16;
      break;
    case KvCompression::int8: f.element = kernels::KvElement::int8; break;
    case KvCompression::int4: f.element = kernels::KvElement::int4; break;
    case KvCompression::int2: f.element = kernels::KvElement::int2; break;
    default:
      throw Unsupported("the host serving engine runs KV compression none, int8, int4 or int2; '" +
                        std::string(kKvCompressionNames.name(c.method)) + "' is simulated only");
  }
  try {
    f.validate();
  } catch (const std::invalid_argument& e) {
    throw Unsupported(std::string("the host device's KV kernels cannot lay this model out: ") + e.what());
  }
  return f;
}

// Physical KV blocks of the pool, handed to sequences as the scheduler grows them.
class BlockPool {
 public:
  explicit BlockPool(std::int64_t blocks) {
    for (std::int64_t b = blocks - 1; b >= 0; --b) free_.push_back(static_cast<std::int32_t>(b));
  }
  /// Makes every running sequence own exactly the blocks the scheduler counts, and releases the
  /// blocks of sequences that left (finished, preempted or swapped out).
  void sync(const std::deque<Sequence>& running) {
    std::unordered_map<std::size_t, std::int64_t> want;
    for (const auto& q : running) want[q.record] = q.blocks;
    for (auto it = owned_.begin(); it != owned_.end();) {
      auto w = want.find(it->first);
      const std::int64_t keep = w == want.end() ? 0 : w->second;
      while (static_cast<std::int64_t>(it->second.size()) > keep) {
        free_.push_back(it->second.back());
        it->second.pop_back();
      }
      it = it->second.empty() ? owned_.erase(it) : std::next(it);
    }
    for (const auto& [record, blocks] : want) {
      auto& mine = owned_[record];
      while (static_cast<std::int64_t>(mine.size()) < blocks) {
        if (free_.empty()) throw std::logic_error("KV block pool exhausted: the scheduler and the pool disagree");
        mine.push_back(free_.back());
        free_.pop_back();
      }
    }
  }
  [[nodiscard]] const std::vector<std::int32_t>& of(std::size_t record) const { return owned_.at(record); }

 private:
  std::vector<std::int32_t> free_;
  std::unordered_map<std::size_t, std::vector<std::int32_t>> owned_;
};

// The model's tensors and one iteration's forward pass.
class HostModel {
 public:
  HostModel(const Scenario& s, CachingAllocator& allocator, HostKernels& kernels, std::int64_t capacity_blocks,
            std::int64_t weight_bytes)
      : s_(s), m_(s.model), allocator_(allocator), kernels_(kernels) {
    const bool gated = m_.mlp == MlpKind::swiglu || m_.mlp == MlpKind::geglu;
    q_ = m_.heads * m_.head_dim;
    kv_ = m_.kv_heads * m_.head_dim;
    up_ = (gated ? 2 : 1) * m_.intermediate;
    width_ = std::max(2 * q_ + 2 * kv_, up_ + m_.intermediate);
    const std::int64_t per_layer = static_cast<std::int64_t>(m_.hidden) * (q_ + 2 * kv_) + static_cast<std::int64_t>(q_) * m_.hidden +
                                   static_cast<std::int64_t>(m_.hidden) * up_ + static_cast<std::int64_t>(m_.intermediate) * m_.hidden;
    const std::int64_t head = static_cast<std::int64_t>(m_.hidden) * m_.vocab;
    // One allocation the size the memory model counts (embeddings and norms included); the
    // matrices the GEMMs read are carved from it.
    if ((per_layer * m_.layers + head) * 4 > weight_bytes) throw std::logic_error("weights larger than the memory model counts");
    weights_ = static_cast<float*>(allocator_.allocate(weight_bytes, "weights"));
    float* w = weights_;
    for (int l = 0; l < m_.layers; ++l) {
      Layer layer;
      layer.qkv = w, w += static_cast<std::int64_t>(m_.hidden) * (q_ + 2 * kv_);
      layer.o = w, w += static_cast<std::int64_t>(q_) * m_.hidden;
      layer.up = w, w += static_cast<std::int64_t>(m_.hidden) * up_;
      layer.down = w, w += static_cast<std::int64_t>(m_.intermediate) * m_.hidden;
      layers_.push_back(layer);
    }
    lm_head_ = w;
    shape_.num_blocks = static_cast<int>(capacity_blocks);
    shape_.block_size = s.inference->serving.block_size;
    shape_.kv_heads = m_.kv_heads;
    shape_.format = kv_format(s);
    pool_bytes_ = static_cast<std::int64_t>(shape_.bytes()) * 2 * m_.layers;
    const int half = m_.head_dim / 2, positions = s.inference->serving.max_model_len + 1;
    rope_cos_.resize(static_cast<std::size_t>(positions) * half);
    rope_sin_.resize(rope_cos_.size());
    for (int p = 0; p < positions; ++p)
      for (int j = 0; j < half; ++j) {
        const double angle = p * std::pow(10000.0, -2.0 * j / m_.head_dim);
        rope_cos_[static_cast<std::size_t>(p) * half + j] = static_cast<float>(std::cos(angle));
        rope_sin_[static_cast<std::size_t>(p) * half + j] = static_cast<float>(std::sin(angle));
      }
    pool_ = static_cast<std::uint8_t*>(allocator_.allocate(pool_bytes_, "kv_cache"));
  }
  ~HostModel() {
    allocator_.release(pool_);
    allocator_.release(weights_);
  }
  HostModel(const HostModel&) = delete;
  HostModel& operator=(const HostModel&) = delete;
  [[nodiscard]] std::int64_t pool_bytes() const { return pool_bytes_; }

  void forward(const ScheduledIteration& it, const BlockPool& blocks) {
    const int h = m_.hidden, d = m_.head_dim;
    const int decodes = static_cast<int>(it.decoding.size());
    int tokens = decodes, outputs = decodes;
    for (std::size_t i = 0; i < it.prefilling.size(); ++i) {
      tokens += it.chunks[i];
      outputs += it.prefilling[i]->prefilled + it.chunks[i] >= it.prefilling[i]->prompt ? 1 : 0;
    }
    // Where each token's K and V go: decodes first, then the prefill chunks in order.
    slots_.clear();
    positions_.clear();
    auto slot = [&](const Sequence& q, int position) {
      const auto& owned = blocks.of(q.record);
      return static_cast<std::int64_t>(owned.at(static_cast<std::size_t>(position / shape_.block_size))) * shape_.block_size +
             position % shape_.block_size;
    };
    auto place = [&](const Sequence& q, int position) {
      slots_.push_back(slot(q, position));
      positions_.push_back(position);
    };
    for (const Sequence* q : it.decoding) place(*q, q->prompt + q->generated - 1);
    for (std::size_t i = 0; i < it.prefilling.size(); ++i)
      for (int t = 0; t < it.chunks[i]; ++t) place(*it.prefilling[i], it.prefilling[i]->prefilled + t);
    // Decode attention's block tables.
    int max_blocks = 1;
    for (const Sequence* q : it.decoding) max_blocks = std::max(max_blocks, static_cast<int>(blocks.of(q->record).size()));
    tables_.assign(static_cast<std::size_t>(decodes) * max_blocks, 0);
    context_.assign(static_cast<std::size_t>(decodes), 0);
    for (int i = 0; i < decodes; ++i) {
      const auto& owned = blocks.of(it.decoding[static_cast<std::size_t>(i)]->record);
      std::copy(owned.begin(), owned.end(), tables_.begin() + static_cast<long>(i) * max_blocks);
      context_[static_cast<std::size_t>(i)] = it.decoding[static_cast<std::size_t>(i)]->prompt + it.decoding[static_cast<std::size_t>(i)]->generated;
    }

    // Activations as vLLM's profile counts them: the residual stream, the normed input, one
    // intermediate (the larger of attention's and the MLP's), the logits and their probabilities.
    auto* residual = static_cast<float*>(allocator_.allocate(4LL * tokens * h, "activations.residual"));
    auto* normed = static_cast<float*>(allocator_.allocate(4LL * tokens * h, "activations.normed"));
    auto* inter = static_cast<float*>(allocator_.allocate(4LL * tokens * width_, "activations.intermediate"));
    auto* logits = static_cast<float*>(allocator_.allocate(8LL * outputs * m_.vocab, "activations.logits"));
    std::fill(residual, residual + static_cast<std::ptrdiff_t>(tokens) * h, 0.01f);  // the embedded tokens
    k_new_.resize(static_cast<std::size_t>(tokens) * kv_);
    v_new_.resize(static_cast<std::size_t>(tokens) * kv_);
    query_.resize(static_cast<std::size_t>(decodes) * q_);
    attended_.resize(static_cast<std::size_t>(decodes) * q_);

    for (int l = 0; l < m_.layers; ++l) {
      const Layer& w = layers_[static_cast<std::size_t>(l)];
      std::uint8_t* k_cache = pool_ + shape_.bytes() * (2 * static_cast<std::size_t>(l));
      std::uint8_t* v_cache = k_cache + shape_.bytes();
      // Pre-norm, then the QKV projection into the intermediate rows: [q | k | v | attention
      // output], then rotary position embedding on q and k.
      rms_norm(residual, normed, tokens);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, tokens, q_ + 2 * kv_, h, 1.0f, normed, h, w.qkv, q_ + 2 * kv_,
                  0.0f, inter, width_);
      rotary(inter, tokens);
      for (int t = 0; t < tokens; ++t) {
        const float* row = inter + static_cast<std::ptrdiff_t>(t) * width_;
        std::copy(row + q_, row + q_ + kv_, k_new_.begin() + static_cast<long>(t) * kv_);
        std::copy(row + q_ + kv_, row + q_ + 2 * kv_, v_new_.begin() + static_cast<long>(t) * kv_);
      }
      kernels::write_paged(k_new_.data(), slots_.data(), tokens, shape_, k_cache);
      kernels::write_paged(v_new_.data(), slots_.data(), tokens, shape_, v_cache);
      if (decodes > 0) {
        for (int i = 0; i < decodes; ++i) {
          const float* row = inter + static_cast<std::ptrdiff_t>(i) * width_;
          std::copy(row, row + q_, query_.begin() + static_cast<long>(i) * q_);
        }
        kernels::decode_attention(kernels::make_decode_args(query_.data(), k_cache, v_cache, tables_.data(), context_.data(),
                                                            attended_.data(), decodes, m_.heads, max_blocks, shape_));
        for (int i = 0; i < decodes; ++i) {
          std::copy(attended_.begin() + static_cast<long>(i) * q_, attended_.begin() + static_cast<long>(i + 1) * q_,
                    inter + static_cast<std::ptrdiff_t>(i) * width_ + q_ + 2 * kv_);
        }
      }
      // Prefill attention: each chunk's queries against its prefix and itself (causal: half the
      // chunk on average), per head, as the iteration model counts it.
      for (std::size_t i = 0; i < it.prefilling.size(); ++i) {
        const std::int64_t c = it.chunks[i];
        const std::int64_t context = it.prefilling[i]->prefilled + (c + 1) / 2;
        kernels_.gemm({c, context, d, m_.heads});
        kernels_.gemm({c, d, context, m_.heads});
      }
      // Output projection added to the residual stream (beta 1), then the MLP on its norm.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, tokens, h, q_, 1.0f, inter + q_ + 2 * kv_, width_, w.o, h, 1.0f,
                  residual, h);
      rms_norm(residual, normed, tokens);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, tokens, up_, h, 1.0f, normed, h, w.up, up_, 0.0f, inter, width_);
      const int inner = m_.intermediate;
      for (int t = 0; t < tokens; ++t) activation(inter + static_cast<std::ptrdiff_t>(t) * width_);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, tokens, h, inner, 1.0f, inter + up_, width_, w.down, h, 1.0f,
                  residual, h);
    }
    // The output head for the tokens that produce one (as many rows as outputs), greedy sampling.
    if (outputs > 0) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, outputs, m_.vocab, h, 1.0f, residual, h, lm_head_, m_.vocab,
                  0.0f, logits, m_.vocab);
      for (int r = 0; r < outputs; ++r) {
        const float* row = logits + static_cast<std::ptrdiff_t>(r) * m_.vocab;
        sampled_ = static_cast<int>(std::max_element(row, row + m_.vocab) - row);
      }
    }
    allocator_.release(logits);
    allocator_.release(inter);
    allocator_.release(normed);
    allocator_.release(residual);
  }

 private:
  // RMSNorm of each token's hidden state (unit weights).
  void rms_norm(const float* in, float* out, int tokens) const {
    const int h = m_.hidden;
    for (int t = 0; t < tokens; ++t) {
      const float* x = in + static_cast<std::ptrdiff_t>(t) * h;
      float* y = out + static_cast<std::ptrdiff_t>(t) * h;
      float squares = 0;
#pragma omp simd reduction(+ : squares)
      for (int j = 0; j < h; ++j) squares += x[j] * x[j];
      const float scale = 1.0f / std::sqrt(squares / static_cast<float>(h) + 1e-5f);
#pragma omp simd
      for (int j = 0; j < h; ++j) y[j] = x[j] * scale;
    }
  }

  // Rotary position embedding (the rotate-half form) of the q and k heads of each token's row.
  void rotary(float* inter, int tokens) const {
    const int half = m_.head_dim / 2;
    for (int t = 0; t < tokens; ++t) {
      const float* cos = rope_cos_.data() + static_cast<std::ptrdiff_t>(positions_[static_cast<std::size_t>(t)]) * half;
      const float* sin = rope_sin_.data() + static_cast<std::ptrdiff_t>(positions_[static_cast<std::size_t>(t)]) * half;
      float* row = inter + static_cast<std::ptrdiff_t>(t) * width_;
      for (int head = 0; head < m_.heads + m_.kv_heads; ++head) {
        float* x = row + static_cast<std::ptrdiff_t>(head) * m_.head_dim;
#pragma omp simd
        for (int j = 0; j < half; ++j) {
          const float a = x[j], b = x[j + half];
          x[j] = a * cos[j] - b * sin[j];
          x[j + half] = a * sin[j] + b * cos[j];
        }
      }
    }
  }

  // SiLU(gate) x up into the row's third part (or GeLU-free SiLU for ungated MLPs).
  void activation(float* row) const {
    const int inner = m_.intermediate;
    const bool gated = up_ > inner;
    float* out = row + up_;
#pragma omp simd
    for (int j = 0; j < inner; ++j) {
      const float g = row[j];
      out[j] = g / (1.0f + std::exp(-g)) * (gated ? row[inner + j] : 1.0f);
    }
  }

  struct Layer {
    float *qkv = nullptr, *o = nullptr, *up = nullptr, *down = nullptr;
  };
  const Scenario& s_;
  const ModelSpec& m_;
  CachingAllocator& allocator_;
  HostKernels& kernels_;
  int q_ = 0, kv_ = 0, up_ = 0, width_ = 0;
  float* weights_ = nullptr;
  float* lm_head_ = nullptr;
  std::vector<Layer> layers_;
  kernels::PagedShape shape_;
  std::uint8_t* pool_ = nullptr;
  std::int64_t pool_bytes_ = 0;
  std::vector<std::int64_t> slots_;
  std::vector<int> positions_;
  std::vector<float> rope_cos_, rope_sin_;  ///< [max_model_len, head_dim / 2]
  std::vector<std::int32_t> tables_, context_;
  std::vector<float> k_new_, v_new_, query_, attended_;
  int sampled_ = 0;
};

}  // namespace

void require_host_serving_support(const Scenario& s) {
  const Inference& inf = *s.inference;
  if (inf.serving.replicas != 1 || inf.serving.tensor_parallel != 1 || inf.serving.pipeline_parallel != 1) {
    throw Unsupported("the host serving engine runs one replica without tensor or pipeline parallelism");
  }
  if (inf.weight_dtype != WeightDtype::fp32) {
    throw Unsupported("the host device computes in fp32 (OpenBLAS sgemm): set inference.weights.dtype: fp32");
  }
  if (s.model.experts > 1) throw Unsupported("the host serving engine runs dense models, not mixture-of-experts");
  if (inf.serving.prefix_caching && inf.workload.shared_prefix_groups > 0) {
    throw Unsupported("the host serving engine does not share prefix blocks yet; prefix caching is simulated only");
  }
  if (!s.model.architecture_known) throw Unsupported("serving on a device needs the model's architecture");
  kv_format(s);
}

HostServing serve_on_host(const Scenario& s) {
  require_host_serving_support(s);
  using Clock = std::chrono::steady_clock;
  const Inference& inf = *s.inference;
  use_one_core();
  const ServingMemory memory = serving_memory(s);
  HostKernels kernels;
  CachingAllocator allocator(s.cluster.gpu.memory.count(), host_device_memory());
  HostServing out;
  out.runtime_bytes = resident_bytes();
  reset_peak_resident();
  out.run = start_serving_run(generate_requests(inf, s.seed));
  ServingRun& run = out.run;
  run.capacity_blocks = memory.capacity_blocks;
  {
    HostModel model(s, allocator, kernels, memory.capacity_blocks, memory.weights.count());
    out.weights_bytes = memory.weights.count();
    out.kv_pool_bytes = model.pool_bytes();
    const auto kv = make_kv_compressor(inf.kv_cache.compression, serving_kv_shape(s));
    BatchScheduler scheduler(0, s, *kv, run, memory.capacity_blocks, memory.block_bytes.as_double());
    BlockPool blocks(memory.capacity_blocks);

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
      blocks.sync(scheduler.running());
      const double started = now();
      if (it->swap_out_bytes + it->swap_in_bytes > 0) kernels.memcopy(it->swap_out_bytes + it->swap_in_bytes);
      model.forward(*it, blocks);
      scheduler.complete(*it, started, now());
    }
    run.makespan_s = now();
    run.last_arrival_s = closed_loop || total == 0 ? run.makespan_s : run.requests.back().arrival_s;
  }
  out.allocator = allocator.stats();
  out.peak_resident_bytes = peak_resident_bytes();
  return out;
}

}  // namespace memtwin::hw
