// int8 / int4 / int2: each token's K and V quantised in groups along channels, an fp16 scale and
// zero point per group (the layout of vLLM's and llama.cpp's quantised caches).
#include "models/kv/kv_method_list.h"
#include "models/kv/kv_methods.h"

namespace memtwin::kv_methods_detail {

KvParameter group_size_parameter() {
  return {.key = "group_size", .meaning = "quantisation group", .default_value = "32", .min = 1};
}

namespace {

template <int Bits>
KvMethod int_groups(KvCompression id) {
  KvMethod m;
  m.id = id;
  m.parameters = {group_size_parameter()};
  m.storage = KvStorage::token_groups;
  m.selection = KvSelection::all;
  const std::string name(m.name());
  m.kernel_formats = {{name, name + " KV cache"}};
  m.quality_variants = [](int, double) -> std::vector<KvQualityVariant> {
    return {{"groups of 32 channels", {"compression.group_size=32"}}};
  };
  m.read = [](const KvParameterReader& r, CompressionSpec& c) {
    c.bits = Bits;
    c.group_size = r.integer("group_size");
  };
  m.make = [](const CompressionSpec& c, const KvShape& shape) -> std::unique_ptr<KvCompressor> {
    return std::make_unique<GroupQuantKv>(shape, c.bits, c.group_size, false, 0);
  };
  return m;
}

}  // namespace

const KvMethod& int8_method() {
  static const KvMethod method = int_groups<8>(KvCompression::int8);
  return method;
}
const KvMethod& int4_method() {
  static const KvMethod method = int_groups<4>(KvCompression::int4);
  return method;
}
const KvMethod& int2_method() {
  static const KvMethod method = int_groups<2>(KvCompression::int2);
  return method;
}

}  // namespace memtwin::kv_methods_detail
