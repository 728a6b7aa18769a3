#include <algorithm>
#include <cmath>
#include <numeric>

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

}  // namespace memtwin
