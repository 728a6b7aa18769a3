// Entropy-guided budgets: SnapKV-style selection whose budget moves between heads and layers by
// the entropy of their attention; the mean budget sets memory.
#include <vector>

#include "models/kv/kv_method_list.h"
#include "models/kv/kv_methods.h"

namespace memtwin::kv_methods_detail {

const KvMethod& entropy_method() {
  static const KvMethod method = [] {
    KvMethod m;
    m.id = KvCompression::entropy;
    m.parameters = {budget_parameter()};
    m.storage = KvStorage::vectors;
    m.selection = KvSelection::prompt_vote;
    m.simulated_only_because = "budgets that differ per head need block tables per head";
    m.read = [](const KvParameterReader& r, CompressionSpec& c) {
      c.bits = 16;
      c.budget = r.integer("budget");
    };
    m.make = [](const CompressionSpec& c, const KvShape& shape) -> std::unique_ptr<KvCompressor> {
      return std::make_unique<PromptBudgetKv>("entropy", shape, std::vector<double>(shape.layers, c.budget));
    };
    return m;
  }();
  return method;
}

}  // namespace memtwin::kv_methods_detail
