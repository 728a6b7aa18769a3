// DeviceModel with a real model's weights (hw/real_weights.h): loading them into the synthetic
// weights' layout, embedding the iteration's tokens, each prompt's attention, and the output rows'
// logits. The rest of the forward pass is hw/device_model.cpp's, the same for both.
#include <algorithm>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>

#include "hw/device_model.h"
#include "models/backend.h"

namespace memtwin::hw {

// The real model's weights, laid out as the synthetic ones are: each linear layer [out, in]
// transposed to the [in, out] the GEMMs read, Q, K and V side by side, gate then up; the output
// head likewise; the embedding table and the norms in allocations of their own.
void DeviceModel::load_real(const RealWeights& r) {
  if (m_.experts > 1 || up_ != 2 * m_.intermediate) throw Unsupported("a real model runs dense, with a gated MLP (SwiGLU)");
  if (static_cast<int>(r.layers.size()) != m_.layers) {
    throw Unsupported("the real model has " + std::to_string(r.layers.size()) + " layers, the scenario's model " +
                      std::to_string(m_.layers));
  }
  if (!kernels_.supports_causal_attention()) {
    throw Unsupported("this device does not compute prompt attention yet: a real model runs on --device host");
  }
  real_ = &r;
  const int h = m_.hidden, inter = m_.intermediate, vocab = m_.vocab;
  std::vector<float> staging;
  staging.reserve(static_cast<std::size_t>(h) * std::max({vocab, q_ + 2 * kv_, up_}));
  // Matrices [outs, in] side by side, transposed to the [in, sum of outs] a GEMM reads, in 32 x 32
  // tiles (both sides are read and written a cache line at a time), then to the device.
  auto send_transposed = [&](float* device, int in, std::initializer_list<std::pair<const float*, int>> parts) {
    int width = 0;
    for (const auto& part : parts) width += part.second;
    staging.assign(static_cast<std::size_t>(in) * width, 0.0f);
    int column = 0;
    for (const auto& [w, outs] : parts) {
      constexpr int kTile = 32;
      for (int o0 = 0; o0 < outs; o0 += kTile)
        for (int i0 = 0; i0 < in; i0 += kTile)
          for (int o = o0; o < std::min(outs, o0 + kTile); ++o)
            for (int i = i0; i < std::min(in, i0 + kTile); ++i)
              staging[static_cast<std::size_t>(i) * width + column + o] = w[static_cast<std::size_t>(o) * in + i];
      column += outs;
    }
    kernels_.upload(device, staging.data(), 4LL * static_cast<std::int64_t>(staging.size()));
  };
  using Role = ServingGemm::Role;
  for (int l = 0; l < m_.layers; ++l) {
    const RealWeights::Layer& w = r.layers[static_cast<std::size_t>(l)];
    float* const* to = layers_[static_cast<std::size_t>(l)].matrix;
    send_transposed(to[static_cast<int>(Role::qkv)], h, {{w.q, q_}, {w.k, kv_}, {w.v, kv_}});
    send_transposed(to[static_cast<int>(Role::attention_out)], q_, {{w.o, h}});
    send_transposed(to[static_cast<int>(Role::gate_up)], h, {{w.gate, inter}, {w.up, inter}});
    send_transposed(to[static_cast<int>(Role::down)], inter, {{w.down, h}});
  }
  send_transposed(lm_head_, h, {{r.output, vocab}});
  embeddings_ = tensor(4LL * vocab * h, "weights.embeddings");
  kernels_.upload(embeddings_, r.embeddings, 4LL * vocab * h);
  staging.clear();
  for (const RealWeights::Layer& w : r.layers) {
    staging.insert(staging.end(), w.attn_norm, w.attn_norm + h);
    staging.insert(staging.end(), w.ffn_norm, w.ffn_norm + h);
  }
  staging.insert(staging.end(), r.output_norm, r.output_norm + h);
  norms_ = tensor(4LL * static_cast<std::int64_t>(staging.size()), "weights.norms");
  kernels_.upload(norms_, staging.data(), 4LL * static_cast<std::int64_t>(staging.size()));
}

void DeviceModel::embed(const ScheduledIteration& it, TokenStream& tokens, float* residual) {
  const int h = m_.hidden;
  int row = 0;
  auto put = [&](const Sequence& q, int position) {
    const int id = tokens.token(q.record, position);
    if (id < 0 || id >= m_.vocab) {
      throw std::invalid_argument("token " + std::to_string(id) + " is outside the model's vocabulary of " + std::to_string(m_.vocab));
    }
    kernels_.copy_rows(embeddings_ + static_cast<std::int64_t>(id) * h, h, residual + static_cast<std::int64_t>(row++) * h, h, 1, h);
  };
  for (const Sequence* q : it.decoding) put(*q, q->prompt + q->generated - 1);
  for (std::size_t i = 0; i < it.prefilling.size(); ++i)
    for (int t = 0; t < it.chunks[i]; ++t) put(*it.prefilling[i], it.prefilling[i]->prefilled + t);
}

void DeviceModel::prompt_attention(const ScheduledIteration& it, float* inter) {
  std::int64_t row = static_cast<std::int64_t>(it.decoding.size());
  for (std::size_t i = 0; i < it.prefilling.size(); ++i) {
    const Sequence& q = *it.prefilling[i];
    const int chunk = it.chunks[i];
    if (q.prefilled != 0 || chunk != q.prompt) {
      throw Unsupported("a real model prefills each prompt in one chunk: inference.serving.max_num_batched_tokens must hold "
                        "the longest prompt (" + std::to_string(q.prompt) + " tokens)");
    }
    float* rows = inter + row * width_;
    kernels_.causal_attention(rows, width_, chunk, m_.heads, m_.kv_heads, m_.head_dim, rows + q_ + 2 * kv_, width_);
    row += chunk;
  }
}

void DeviceModel::real_logits(const ScheduledIteration& it, const float* residual, float* gathered, float* normed, float* logits,
                              TokenStream& tokens) {
  const int h = m_.hidden, vocab = m_.vocab, decodes = static_cast<int>(it.decoding.size());
  std::vector<std::pair<std::size_t, int>> outputs;  // (record, position of the token the row follows)
  kernels_.copy_rows(residual, h, gathered, h, decodes, h);
  for (const Sequence* q : it.decoding) outputs.emplace_back(q->record, q->prompt + q->generated - 1);
  std::int64_t row = decodes;
  for (std::size_t i = 0; i < it.prefilling.size(); ++i) {
    const Sequence& q = *it.prefilling[i];
    row += it.chunks[i];
    if (q.prefilled + it.chunks[i] < q.prompt) continue;
    kernels_.copy_rows(residual + (row - 1) * h, h, gathered + static_cast<std::int64_t>(outputs.size()) * h, h, 1, h);
    outputs.emplace_back(q.record, q.prompt - 1);
  }
  const int n = static_cast<int>(outputs.size());
  kernels_.rms_norm(gathered, normed, n, h, norms_ + 2LL * m_.layers * h, static_cast<float>(real_->rms_norm_eps));
  kernels_.gemm(n, vocab, h, normed, h, lm_head_, vocab, 0.0f, logits, vocab);
  host_logits_.resize(static_cast<std::size_t>(n) * vocab);
  kernels_.download(host_logits_.data(), logits, 4LL * n * vocab);
  for (int k = 0; k < n; ++k) {
    tokens.logits(outputs[static_cast<std::size_t>(k)].first, outputs[static_cast<std::size_t>(k)].second,
                  host_logits_.data() + static_cast<std::size_t>(k) * vocab);
  }
}

}  // namespace memtwin::hw
