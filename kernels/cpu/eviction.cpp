#include "kernels/eviction.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>

namespace memtwin::kernels {

void accumulate_attention(const float* probs, int q_heads, int kv_heads, int tokens, float* scores) {
  if (kv_heads <= 0 || q_heads % kv_heads != 0) throw std::invalid_argument("accumulate_attention: q_heads must be a multiple of kv_heads");
  const int group = q_heads / kv_heads;
  for (int h = 0; h < q_heads; ++h) {
    float* s = scores + static_cast<std::size_t>(h / group) * tokens;
    const float* p = probs + static_cast<std::size_t>(h) * tokens;
    for (int t = 0; t < tokens; ++t) s[t] += p[t];
  }
}

void snapkv_scores(const float* attention, int heads, int window, int tokens, int kernel, float* out) {
  if (kernel < 1 || kernel % 2 == 0) throw std::invalid_argument("snapkv_scores: the pooling kernel must be odd and positive");
  std::vector<float> votes(tokens);
  for (int h = 0; h < heads; ++h) {
    std::fill(votes.begin(), votes.end(), 0.f);
    for (int w = 0; w < window; ++w) {
      const float* row = attention + (static_cast<std::size_t>(h) * window + w) * tokens;
      for (int t = 0; t < tokens; ++t) votes[t] += row[t];
    }
    const int half = kernel / 2;
    for (int t = 0; t < tokens; ++t) {
      float best = votes[t];
      for (int d = std::max(0, t - half); d <= std::min(tokens - 1, t + half); ++d) best = std::max(best, votes[d]);
      out[static_cast<std::size_t>(h) * tokens + t] = best;
    }
  }
}

void attention_entropy(const float* probs, int heads, int tokens, float* out) {
  for (int h = 0; h < heads; ++h) {
    double entropy = 0;
    for (int t = 0; t < tokens; ++t) {
      const double p = probs[static_cast<std::size_t>(h) * tokens + t];
      if (p > 0) entropy -= p * std::log(p);
    }
    out[h] = static_cast<float>(entropy);
  }
}

std::vector<int> select_tokens(const float* scores, int tokens, int keep, int sinks, int recent) {
  std::vector<int> kept;
  if (tokens <= keep) {
    kept.resize(tokens);
    std::iota(kept.begin(), kept.end(), 0);
    return kept;
  }
  sinks = std::min(sinks, keep);
  recent = std::min(recent, keep - sinks);
  const int middle_begin = sinks, middle_end = tokens - recent;
  std::vector<int> middle(middle_end - middle_begin);
  std::iota(middle.begin(), middle.end(), middle_begin);
  const int chosen = keep - sinks - recent;
  std::partial_sort(middle.begin(), middle.begin() + chosen, middle.end(), [&](int a, int b) {
    return scores[a] != scores[b] ? scores[a] > scores[b] : a < b;
  });
  for (int t = 0; t < sinks; ++t) kept.push_back(t);
  kept.insert(kept.end(), middle.begin(), middle.begin() + chosen);
  for (int t = middle_end; t < tokens; ++t) kept.push_back(t);
  std::sort(kept.begin(), kept.end());
  return kept;
}

void compact_head(std::uint8_t* cache, const PagedShape& shape, const std::int32_t* block_table, int head,
                  const std::vector<int>& kept) {
  const std::size_t bytes = shape.format.vector_bytes();
  auto at = [&](int logical) {
    return cache + shape.offset(block_table[logical / shape.block_size], logical % shape.block_size, head);
  };
  for (std::size_t i = 0; i < kept.size(); ++i) {
    if (i > 0 && kept[i] <= kept[i - 1]) throw std::invalid_argument("compact_head: kept tokens must ascend");
    // Ascending kept positions never fall below their target, so moving front to back is safe.
    if (static_cast<int>(i) != kept[i]) std::memmove(at(static_cast<int>(i)), at(kept[i]), bytes);
  }
}

}  // namespace memtwin::kernels
