#include "models/kv/kv_methods.h"

namespace memtwin {

std::unique_ptr<KvCompressor> make_kv_compressor(const CompressionSpec& c, const KvShape& shape) {
  switch (c.method) {
    case KvCompression::none: return std::make_unique<FullPrecisionKv>(shape);
    case KvCompression::int8:
    case KvCompression::int4:
    case KvCompression::int2: return std::make_unique<GroupQuantKv>(shape, c.bits, c.group_size, false, 0);
    case KvCompression::kivi: return std::make_unique<GroupQuantKv>(shape, c.bits, c.group_size, true, c.residual);
    case KvCompression::streaming: return std::make_unique<StreamingKv>(shape, c.sinks, c.window);
    case KvCompression::h2o: return std::make_unique<H2oKv>(shape, c.heavy_ratio, c.recent_ratio);
    case KvCompression::snapkv:
      return std::make_unique<PromptBudgetKv>("snapkv", shape, std::vector<double>(shape.layers, c.budget));
    case KvCompression::pyramidkv:
      return std::make_unique<PromptBudgetKv>("pyramidkv", shape, pyramid_budgets(shape.layers, c.budget, c.window, c.beta));
    case KvCompression::entropy:
      // Entropy-guided budgets move tokens between heads and layers; the mean budget sets memory.
      return std::make_unique<PromptBudgetKv>("entropy", shape, std::vector<double>(shape.layers, c.budget));
  }
  return nullptr;
}

}  // namespace memtwin
