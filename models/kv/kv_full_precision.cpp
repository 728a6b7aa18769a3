#include "models/kv/kv_methods.h"

namespace memtwin {

FullPrecisionKv::FullPrecisionKv(const KvShape& shape) : shape_(shape) {}

std::string FullPrecisionKv::name() const { return "none"; }

double FullPrecisionKv::sequence_bytes(std::int64_t prompt, std::int64_t generated) const {
  return static_cast<double>(prompt + generated) * shape_.token_bytes();
}

double FullPrecisionKv::bytes_per_stored_token() const { return shape_.token_bytes(); }

}  // namespace memtwin
