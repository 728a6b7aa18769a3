#include <algorithm>

#include "models/kv/kv_methods.h"

namespace memtwin {

StreamingKv::StreamingKv(const KvShape& shape, int sinks, int window) : shape_(shape), sinks_(sinks), window_(window) {}

std::int64_t StreamingKv::kept_tokens(std::int64_t prompt, std::int64_t generated) const {
  return std::min<std::int64_t>(prompt + generated, sinks_ + window_);
}

double StreamingKv::sequence_bytes(std::int64_t prompt, std::int64_t generated) const {
  return static_cast<double>(kept_tokens(prompt, generated)) * shape_.token_bytes();
}

}  // namespace memtwin
