#pragma once
// The KV-cache methods' identifiers and the names users write (inference.kv_cache.compression.method).
// What each method is lives in its descriptor (models/kv/kv_method.h).
#include "models/enums.h"

namespace memtwin {

enum class KvCompression { none, kivi, int8, int4, int2, streaming, h2o, snapkv, pyramidkv, entropy };
inline constexpr EnumNames<KvCompression, 10> kKvCompressionNames{
    {"none", "kivi", "int8", "int4", "int2", "streaming", "h2o", "snapkv", "pyramidkv", "entropy"}};

}  // namespace memtwin
