// No compression: every token's K and V in kv_cache.dtype (16-bit, or fp8).
#include "models/kv/kv_method_list.h"
#include "models/kv/kv_methods.h"

namespace memtwin {

FullPrecisionKv::FullPrecisionKv(const KvShape& shape) : shape_(shape) {}

std::string FullPrecisionKv::name() const { return "none"; }

double FullPrecisionKv::sequence_bytes(std::int64_t prompt, std::int64_t generated) const {
  return static_cast<double>(prompt + generated) * shape_.token_bytes();
}

double FullPrecisionKv::bytes_per_stored_token() const { return shape_.token_bytes(); }

namespace kv_methods_detail {

const KvMethod& none_method() {
  static const KvMethod method = [] {
    KvMethod m;
    m.id = KvCompression::none;
    m.storage = KvStorage::vectors;
    m.selection = KvSelection::all;
    // The vectors' formats: every method that keeps uncompressed tokens reads its cache in these.
    m.kernel_formats = {{"fp16", "fp16 KV cache"}, {"fp8", "fp8 KV cache"}};
    m.read = [](const KvParameterReader&, CompressionSpec& c) { c.bits = 16; };
    m.quality_variants = [](int, double) -> std::vector<KvQualityVariant> {
      return {{"fp16", {"dtype=fp16"}}, {"fp8 (e4m3, scale 1)", {"dtype=fp8"}}};
    };
    m.make = [](const CompressionSpec&, const KvShape& shape) -> std::unique_ptr<KvCompressor> {
      return std::make_unique<FullPrecisionKv>(shape);
    };
    return m;
  }();
  return method;
}

}  // namespace kv_methods_detail
}  // namespace memtwin
