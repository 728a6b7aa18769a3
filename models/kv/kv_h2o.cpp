#include <algorithm>
#include <cmath>

#include "models/kv/kv_methods.h"

namespace memtwin {

H2oKv::H2oKv(const KvShape& shape, double heavy_ratio, double recent_ratio)
    : shape_(shape), ratio_(heavy_ratio + recent_ratio) {}

std::int64_t H2oKv::kept_tokens(std::int64_t prompt, std::int64_t generated) const {
  const auto budget = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(ratio_ * prompt)));
  return std::min(prompt + generated, budget);
}

double H2oKv::bytes_per_stored_token() const {
  const double scores = 4.0 * shape_.layers * shape_.kv_heads;  // fp32 accumulated attention
  return shape_.token_bytes() + scores;
}

double H2oKv::sequence_bytes(std::int64_t prompt, std::int64_t generated) const {
  return static_cast<double>(kept_tokens(prompt, generated)) * bytes_per_stored_token();
}

double H2oKv::prefill_bytes(std::int64_t prompt) const {
  // The prompt's attention decides the heavy hitters, so it is cached whole until selection.
  return static_cast<double>(prompt) * bytes_per_stored_token();
}

}  // namespace memtwin
