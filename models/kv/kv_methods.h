#pragma once
// The concrete KV compressors (one file each); use make_kv_compressor() rather than these.
#include <vector>

#include "models/kv/kv_compressor.h"

namespace memtwin {

/// No compression: bf16/fp16 or fp8 elements (kv_cache.dtype).
class FullPrecisionKv final : public KvCompressor {
 public:
  explicit FullPrecisionKv(const KvShape& shape);
  std::string name() const override;
  double sequence_bytes(std::int64_t prompt, std::int64_t generated) const override;
  double bytes_per_stored_token() const override;
  double uniform_token_bytes() const override { return shape_.token_bytes(); }

 private:
  KvShape shape_;
};

/// Asymmetric group quantisation with fp16 scale and zero point per group. int8/int4/int2 group
/// keys and values per token along channels; KIVI groups keys per channel along tokens and keeps
/// the most recent `residual` tokens (plus an incomplete group) in full precision.
class GroupQuantKv final : public KvCompressor {
 public:
  GroupQuantKv(const KvShape& shape, int bits, int group_size, bool per_channel_keys, int residual);
  std::string name() const override;
  double sequence_bytes(std::int64_t prompt, std::int64_t generated) const override;
  double bytes_per_stored_token() const override;
  /// Tokens of an n-token sequence held quantised (the rest are full precision).
  std::int64_t quantized_tokens(std::int64_t n) const;
  std::int64_t residual_tokens(std::int64_t prompt, std::int64_t generated) const override {
    return per_channel_keys_ ? prompt + generated - quantized_tokens(prompt + generated) : 0;
  }

 private:
  double group_bytes() const;
  double per_token_vector_bytes() const;
  double per_channel_key_bytes_per_token() const;
  KvShape shape_;
  int bits_, group_;
  bool per_channel_keys_;
  int residual_;
};

/// StreamingLLM: the first `sinks` tokens and a window of the most recent ones; constant memory.
class StreamingKv final : public KvCompressor {
 public:
  StreamingKv(const KvShape& shape, int sinks, int window);
  std::string name() const override { return "streaming"; }
  double sequence_bytes(std::int64_t prompt, std::int64_t generated) const override;
  std::int64_t kept_tokens(std::int64_t prompt, std::int64_t generated) const override;
  double bytes_per_stored_token() const override { return shape_.token_bytes(); }

 private:
  KvShape shape_;
  int sinks_, window_;
};

/// H2O: heavy hitters (by accumulated attention) plus recent tokens, each a fraction of the
/// prompt; the cache then stays at that budget while generating. Keeps an fp32 score per cached
/// token per KV head and layer.
class H2oKv final : public KvCompressor {
 public:
  H2oKv(const KvShape& shape, double heavy_ratio, double recent_ratio);
  std::string name() const override { return "h2o"; }
  double sequence_bytes(std::int64_t prompt, std::int64_t generated) const override;
  double prefill_bytes(std::int64_t prompt) const override;
  std::int64_t kept_tokens(std::int64_t prompt, std::int64_t generated) const override;
  double bytes_per_stored_token() const override;

 private:
  KvShape shape_;
  double ratio_;
};

/// SnapKV / PyramidKV / entropy-guided budgets: after prefill, keep per layer a budget of prompt
/// tokens (selected by the observation window's attention); generated tokens are appended
/// uncompressed. `layer_budgets` holds each layer's budget (equal for SnapKV and entropy's mean,
/// falling linearly with depth for PyramidKV). With the shape's block_size, each layer's tokens are
/// rounded up to whole blocks: a paged engine keeps a block table per layer.
class PromptBudgetKv final : public KvCompressor {
 public:
  PromptBudgetKv(std::string name, const KvShape& shape, std::vector<double> layer_budgets);
  std::string name() const override { return name_; }
  double sequence_bytes(std::int64_t prompt, std::int64_t generated) const override;
  double prefill_bytes(std::int64_t prompt) const override;
  std::int64_t kept_tokens(std::int64_t prompt, std::int64_t generated) const override;
  double bytes_per_stored_token() const override { return shape_.token_bytes(); }
  /// min(prompt, the layer's budget rounded to a whole token) + generated.
  std::int64_t kept_tokens_in_layer(std::int64_t prompt, std::int64_t generated, int layer) const override;

 private:
  std::string name_;
  KvShape shape_;
  std::vector<double> budgets_;
};

/// PyramidKV's per-layer budgets: the selected part falls linearly from max to min with depth,
/// min = (B - w) / beta, max = 2 (B - w) - min, so the mean stays B (Cai et al. 2024).
std::vector<double> pyramid_budgets(int layers, int budget, int window, double beta);

}  // namespace memtwin
