// H2O (Zhang et al. 2023): heavy hitters by accumulated attention and the most recent tokens, each a
// fraction of the prompt; the cache then stays at that budget while generating.
#include <algorithm>
#include <cmath>

#include "models/kv/kv_method_list.h"
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

namespace kv_methods_detail {

const KvMethod& h2o_method() {
  static const KvMethod method = [] {
    KvMethod m;
    m.id = KvCompression::h2o;
    m.parameters = {{.key = "heavy_ratio", .kind = ValueKind::number, .meaning = "heavy hitters, fraction of the prompt",
                     .default_value = "0.1", .min = 0, .max = 1},
                    {.key = "recent_ratio", .kind = ValueKind::number, .meaning = "recent tokens, fraction of the prompt",
                     .default_value = "0.1", .min = 0, .max = 1}};
    m.storage = KvStorage::vectors;
    m.selection = KvSelection::accumulated_scores;
    m.quality_variants = [](int, double budget) -> std::vector<KvQualityVariant> {  // heavy hitters and recent tokens alike
      const std::string half = std::to_string(budget / 2);
      return {{budget_label(budget), {"compression.heavy_ratio=" + half, "compression.recent_ratio=" + half}}};
    };
    m.read = [](const KvParameterReader& r, CompressionSpec& c) {
      c.bits = 16;
      c.heavy_ratio = r.number("heavy_ratio");
      c.recent_ratio = r.number("recent_ratio");
      if (c.heavy_ratio + c.recent_ratio <= 0) r.fail("heavy_ratio", "H2O keeps nothing when heavy_ratio + recent_ratio is 0");
      if (c.heavy_ratio + c.recent_ratio > 1) r.fail("recent_ratio", "heavy_ratio + recent_ratio exceeds 1");
    };
    m.make = [](const CompressionSpec& c, const KvShape& shape) -> std::unique_ptr<KvCompressor> {
      return std::make_unique<H2oKv>(shape, c.heavy_ratio, c.recent_ratio);
    };
    return m;
  }();
  return method;
}

}  // namespace kv_methods_detail
}  // namespace memtwin
