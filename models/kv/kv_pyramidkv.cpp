// PyramidKV (Cai et al. 2024): SnapKV's selection with a budget per layer that falls with depth,
// so each layer keeps its own number of tokens (a block table per layer in a paged engine).
#include <vector>

#include "models/kv/kv_method_list.h"
#include "models/kv/kv_methods.h"

namespace memtwin {

std::vector<double> pyramid_budgets(int layers, int budget, int window, double beta) {
  const double selected = budget - window;
  const double min = selected / beta;
  const double max = 2 * selected - min;
  std::vector<double> out(layers);
  for (int l = 0; l < layers; ++l) {
    const double frac = layers > 1 ? static_cast<double>(l) / (layers - 1) : 0.0;
    out[l] = window + max - (max - min) * frac;
  }
  return out;
}

namespace kv_methods_detail {

const KvMethod& pyramidkv_method() {
  static const KvMethod method = [] {
    KvMethod m;
    m.id = KvCompression::pyramidkv;
    const KvParameter beta{.key = "beta", .kind = ValueKind::number, .meaning = "budget ratio, shallowest to deepest",
                           .default_value = "20", .min = 1, .min_exclusive = true};
    m.parameters = {observation_window_parameter(), budget_parameter(), pooling_kernel_parameter(), beta};
    m.storage = KvStorage::vectors;
    m.selection = KvSelection::prompt_vote;
    m.per_layer_budgets = true;
    m.quality_variants = prompt_vote_variants;
    m.read = [](const KvParameterReader& r, CompressionSpec& c) {
      read_prompt_vote(r, c);
      c.beta = r.number("beta");
    };
    m.make = [](const CompressionSpec& c, const KvShape& shape) -> std::unique_ptr<KvCompressor> {
      return std::make_unique<PromptBudgetKv>("pyramidkv", shape, pyramid_budgets(shape.layers, c.budget, c.window, c.beta));
    };
    return m;
  }();
  return method;
}

}  // namespace kv_methods_detail
}  // namespace memtwin
