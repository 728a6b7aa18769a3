// The SnapKV family's size model (SnapKV, PyramidKV, entropy-guided budgets) and the parameters
// its methods share.
#include <algorithm>
#include <cmath>
#include <string>

#include "models/kv/kv_method_list.h"
#include "models/kv/kv_methods.h"

namespace memtwin {

PromptBudgetKv::PromptBudgetKv(std::string name, const KvShape& shape, std::vector<double> layer_budgets)
    : name_(std::move(name)), shape_(shape), budgets_(std::move(layer_budgets)) {}

double PromptBudgetKv::sequence_bytes(std::int64_t prompt, std::int64_t generated) const {
  const double per_layer_token = shape_.token_bytes() / shape_.layers;
  double bytes = 0;
  if (shape_.block_size > 0) {
    const std::int64_t block = shape_.block_size;
    for (int l = 0; l < static_cast<int>(budgets_.size()); ++l) {
      bytes += static_cast<double>((kept_tokens_in_layer(prompt, generated, l) + block - 1) / block * block) * per_layer_token;
    }
    return bytes;
  }
  for (double b : budgets_) bytes += (std::min<double>(prompt, b) + static_cast<double>(generated)) * per_layer_token;
  return bytes;
}

std::int64_t PromptBudgetKv::kept_tokens_in_layer(std::int64_t prompt, std::int64_t generated, int layer) const {
  return std::min<std::int64_t>(prompt, std::llround(budgets_.at(static_cast<std::size_t>(layer)))) + generated;
}

double PromptBudgetKv::prefill_bytes(std::int64_t prompt) const {
  return static_cast<double>(prompt) * shape_.token_bytes();  // selection needs the whole prompt once
}

std::int64_t PromptBudgetKv::kept_tokens(std::int64_t prompt, std::int64_t generated) const {
  double kept = 0;
  for (double b : budgets_) kept += std::min<double>(prompt, b);
  return static_cast<std::int64_t>(kept / budgets_.size()) + generated;  // mean over layers
}

namespace kv_methods_detail {

KvParameter observation_window_parameter() {
  // Its default is the family's own: StreamingLLM's window is another one.
  return {.key = "window", .meaning = "observation window", .default_value = "32", .default_in_schema = false, .min = 1};
}

KvParameter budget_parameter() {
  return {.key = "budget", .meaning = "tokens kept per head", .default_value = "2048", .min = 1};
}

KvParameter pooling_kernel_parameter() {
  return {.key = "pooling_kernel", .meaning = "score pooling width", .default_value = "7", .min = 1};
}

int budget_tokens(int prompt, double budget, int least) {
  return std::max(least, static_cast<int>(std::lround(budget * prompt)));
}

std::string budget_label(double budget) { return std::to_string(std::lround(budget * 100)) + "% of the prompt"; }

std::vector<KvQualityVariant> prompt_vote_variants(int prompt, double budget) {
  const int keep = budget_tokens(prompt, budget, 2);
  return {{budget_label(budget),
           {"compression.budget=" + std::to_string(keep), "compression.window=" + std::to_string(std::min(32, keep / 2))}}};
}

void read_prompt_vote(const KvParameterReader& r, CompressionSpec& c) {
  c.bits = 16;
  c.window = r.integer("window");
  c.budget = r.integer("budget");
  if (c.budget <= c.window) {
    r.fail("budget", "the budget (" + std::to_string(c.budget) + ") must exceed the observation window (" +
                         std::to_string(c.window) + ")");
  }
  c.pooling_kernel = r.integer("pooling_kernel");
  if (c.pooling_kernel < 1 || c.pooling_kernel % 2 == 0) {
    r.fail("pooling_kernel", "the pooling kernel must be odd and positive (a window centred on each token), got " +
                                 std::to_string(c.pooling_kernel));
  }
}

}  // namespace kv_methods_detail
}  // namespace memtwin
