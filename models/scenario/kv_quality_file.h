#pragma once
// inference.kv_cache.quality: a KV method's quality as `memtwin quality --json` measured it on a
// real model (docs/real-model.md), carried into the scenario's results so that plans can require it.
#include <string>

#include "models/scenario.h"
#include "models/scenario/param_values.h"

namespace memtwin {

/// Reads the document at `path` (memtwin.quality/2) and picks the entry for `kv`: its method, and
/// where the method keeps every token its bits (and fp8 or not); where it keeps fewer, the entry
/// whose budget is nearest `budget` (the share of the prompt the scenario's method keeps). A
/// document that cannot be read, is not quality's, or holds no such entry is refused at the
/// scenario's key (`v.fail`) with the document's file and field.
KvQualityMeasured read_kv_quality(const std::string& path, const KvCacheSpec& kv, double budget, const ParamValues& v);

}  // namespace memtwin
