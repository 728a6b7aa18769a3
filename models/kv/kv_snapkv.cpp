// SnapKV (Li et al. 2024): after prefill, per layer and KV head, the prompt tokens the last
// `window` queries attend to most (max-pooled over neighbours) up to `budget`, and the window itself;
// generated tokens are appended uncompressed.
#include <vector>

#include "models/kv/kv_method_list.h"
#include "models/kv/kv_methods.h"

namespace memtwin::kv_methods_detail {

const KvMethod& snapkv_method() {
  static const KvMethod method = [] {
    KvMethod m;
    m.id = KvCompression::snapkv;
    m.parameters = {observation_window_parameter(), budget_parameter(), pooling_kernel_parameter()};
    m.storage = KvStorage::vectors;
    m.selection = KvSelection::prompt_vote;
    m.read = read_prompt_vote;
    m.quality_variants = prompt_vote_variants;
    m.make = [](const CompressionSpec& c, const KvShape& shape) -> std::unique_ptr<KvCompressor> {
      return std::make_unique<PromptBudgetKv>("snapkv", shape, std::vector<double>(shape.layers, c.budget));
    };
    return m;
  }();
  return method;
}

}  // namespace memtwin::kv_methods_detail
