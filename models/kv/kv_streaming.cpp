// StreamingLLM (Xiao et al. 2024): the first `sinks` tokens and a window of the most recent ones;
// constant memory per sequence.
#include <algorithm>

#include "models/kv/kv_method_list.h"
#include "models/kv/kv_methods.h"

namespace memtwin {

StreamingKv::StreamingKv(const KvShape& shape, int sinks, int window) : shape_(shape), sinks_(sinks), window_(window) {}

std::int64_t StreamingKv::kept_tokens(std::int64_t prompt, std::int64_t generated) const {
  return std::min<std::int64_t>(prompt + generated, sinks_ + window_);
}

double StreamingKv::sequence_bytes(std::int64_t prompt, std::int64_t generated) const {
  return static_cast<double>(kept_tokens(prompt, generated)) * shape_.token_bytes();
}

namespace kv_methods_detail {

const KvMethod& streaming_method() {
  static const KvMethod method = [] {
    KvMethod m;
    m.id = KvCompression::streaming;
    // The window's default is StreamingLLM's own: the prompt-voting methods' window is another one.
    m.parameters = {{.key = "sinks", .meaning = "attention-sink tokens", .default_value = "4", .min = 0},
                    {.key = "window", .meaning = "recent window", .default_value = "1020", .default_in_schema = false, .min = 1}};
    m.storage = KvStorage::vectors;
    m.selection = KvSelection::sinks_and_window;
    m.quality_variants = [](int prompt, double budget) -> std::vector<KvQualityVariant> {
      const int keep = budget_tokens(prompt, budget, 2), sinks = std::min(4, keep - 1);
      return {{budget_label(budget),
               {"compression.sinks=" + std::to_string(sinks), "compression.window=" + std::to_string(keep - sinks)}}};
    };
    m.read = [](const KvParameterReader& r, CompressionSpec& c) {
      c.bits = 16;
      c.sinks = r.integer("sinks");
      c.window = r.integer("window");
    };
    m.make = [](const CompressionSpec& c, const KvShape& shape) -> std::unique_ptr<KvCompressor> {
      return std::make_unique<StreamingKv>(shape, c.sinks, c.window);
    };
    return m;
  }();
  return method;
}

}  // namespace kv_methods_detail
}  // namespace memtwin
