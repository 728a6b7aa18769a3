#include "models/kv/kv_methods.h"

#include <algorithm>
#include <cmath>

namespace memtwin {
namespace {
constexpr double kConstantsPerGroup = 4;  // fp16 scale + fp16 zero point
}

GroupQuantKv::GroupQuantKv(const KvShape& shape, int bits, int group_size, bool per_channel_keys, int residual)
    : shape_(shape), bits_(bits), group_(group_size), per_channel_keys_(per_channel_keys), residual_(residual) {}

std::string GroupQuantKv::name() const {
  return per_channel_keys_ ? "kivi" + std::to_string(bits_) : "int" + std::to_string(bits_);
}

double GroupQuantKv::group_bytes() const {
  return std::ceil(group_ * bits_ / 8.0) + kConstantsPerGroup;  // packed codes + constants
}

// Values (and keys without KIVI) are grouped along channels: ceil(head_dim / G) groups per token.
double GroupQuantKv::per_token_vector_bytes() const {
  return std::ceil(static_cast<double>(shape_.head_dim) / group_) * group_bytes();
}

// KIVI keys are grouped along tokens, one group of G tokens per channel.
double GroupQuantKv::per_channel_key_bytes_per_token() const { return shape_.head_dim * group_bytes() / group_; }

std::int64_t GroupQuantKv::quantized_tokens(std::int64_t n) const {
  if (!per_channel_keys_) return n;
  // KIVI: the newest tokens wait in a full-precision residual; once R are beyond a group
  // boundary, whole groups of G are quantised.
  const std::int64_t eligible = std::max<std::int64_t>(0, n - residual_);
  return eligible / group_ * group_;
}

double GroupQuantKv::sequence_bytes(std::int64_t prompt, std::int64_t generated) const {
  const std::int64_t n = prompt + generated;
  const std::int64_t q = quantized_tokens(n);
  const double key = per_channel_keys_ ? per_channel_key_bytes_per_token() : per_token_vector_bytes();
  const double quantized = static_cast<double>(q) * (key + per_token_vector_bytes());
  const double full = static_cast<double>(n - q) * 2.0 * shape_.head_dim * shape_.element_bytes;
  return static_cast<double>(shape_.layers) * shape_.kv_heads * (quantized + full);
}

double GroupQuantKv::bytes_per_stored_token() const {
  const double key = per_channel_keys_ ? per_channel_key_bytes_per_token() : per_token_vector_bytes();
  return static_cast<double>(shape_.layers) * shape_.kv_heads * (key + per_token_vector_bytes());
}

}  // namespace memtwin
