#pragma once
// KIVI (Liu et al. 2024): keys quantised per channel in groups of G tokens, values per token in
// groups of G channels, the newest tokens kept in full precision until a whole group of keys can be
// quantised beyond a residual window of R tokens. KiviSequence is one sequence's cache for one KV
// head, built with the same kernels; its bytes equal memtwin's size model (GroupQuantKv with
// per-channel keys) token for token — a test checks it.
#include <cstdint>
#include <vector>

#include "kernels/kv_format.h"

namespace memtwin::kernels {

/// Quantises a block of G keys, [G, head_dim] floats, channel by channel: per channel the G codes
/// (packed, low bits first) then a fp16 scale and zero point. Output: head_dim * (ceil(G*bits/8) + 4) bytes.
void quantize_keys_per_channel(const float* keys, int group, int head_dim, int bits, std::uint8_t* out);
void dequantize_keys_per_channel(const std::uint8_t* in, int group, int head_dim, int bits, float* keys);

class KiviSequence {
 public:
  KiviSequence(int head_dim, int bits, int group, int residual);
  /// Appends one token's key and value (head_dim floats each).
  void append(const float* key, const float* value);
  [[nodiscard]] std::int64_t tokens() const { return quantized_ + static_cast<std::int64_t>(residual_k_.size()) / head_dim_; }
  [[nodiscard]] std::int64_t quantized_tokens() const { return quantized_; }
  /// Bytes held: quantised key groups, quantised values, and the fp16 residual K and V.
  [[nodiscard]] std::size_t bytes() const;
  /// All keys and values as the cache holds them, dequantised: [tokens, head_dim] each.
  void read(std::vector<float>& keys, std::vector<float>& values) const;

 private:
  int head_dim_, bits_, group_, residual_;
  KvFormat value_format_;
  std::int64_t quantized_ = 0;
  std::vector<std::uint8_t> key_groups_;   // quantised key blocks, G tokens each
  std::vector<std::uint8_t> values_;       // quantised value vectors, one per quantised token
  std::vector<float> residual_k_, residual_v_;  // full precision, stored as fp16 (counted 2 bytes)
};

}  // namespace memtwin::kernels
