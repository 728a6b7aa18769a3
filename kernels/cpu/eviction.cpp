#include "kernels/eviction.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

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

namespace {

// Moves the vectors at the kept logical positions (ascending) to 0..kept.size()-1; `at` addresses
// one position's vector of `bytes` bytes.
template <class At>
void compact(At at, std::size_t bytes, const std::vector<int>& kept) {
  for (std::size_t i = 0; i < kept.size(); ++i) {
    if (i > 0 && kept[i] <= kept[i - 1]) throw std::invalid_argument("compact_head: kept tokens must ascend");
    // Ascending kept positions never fall below their target, so moving front to back is safe.
    if (static_cast<int>(i) != kept[i]) std::memmove(at(static_cast<int>(i)), at(kept[i]), bytes);
  }
}

}  // namespace

void compact_head(std::uint8_t* cache, const PagedShape& shape, const std::int32_t* block_table, int head,
                  const std::vector<int>& kept) {
  compact([&](int logical) { return cache + shape.offset(block_table[logical / shape.block_size], logical % shape.block_size, head); },
          shape.format.vector_bytes(), kept);
}

void accumulate_paged_scores(const float* probs, int rows, int q_heads, int probs_stride, const std::int32_t* block_tables,
                             int max_blocks_per_seq, const std::int32_t* context_lens, const PagedScores& scores) {
  if (scores.kv_heads <= 0 || q_heads % scores.kv_heads != 0) {
    throw std::invalid_argument("accumulate_paged_scores: q_heads must be a multiple of kv_heads");
  }
  for (int r = 0; r < rows; ++r) {
    if (context_lens[r] < 0 || context_lens[r] > std::min(probs_stride, max_blocks_per_seq * scores.block_size)) {
      throw std::invalid_argument("accumulate_paged_scores: context length out of range for row " + std::to_string(r));
    }
  }
  const int group = q_heads / scores.kv_heads;
  // One thread per KV head: rows of one sequence add to the same scores, heads never do.
#pragma omp parallel for schedule(static) if (rows * scores.kv_heads >= 64)
  for (int kvh = 0; kvh < scores.kv_heads; ++kvh) {
    for (int r = 0; r < rows; ++r) {
      const std::int32_t* table = block_tables + static_cast<std::size_t>(r) * max_blocks_per_seq;
      for (int g = 0; g < group; ++g) {
        const float* p = probs + (static_cast<std::size_t>(r) * q_heads + kvh * group + g) * probs_stride;
        for (int t = 0; t < context_lens[r]; ++t) *scores.at(table, t, kvh) += p[t];
      }
    }
  }
}

void select_and_compact(std::uint8_t* k_cache, std::uint8_t* v_cache, const PagedShape& shape, const PagedScores& scores,
                        const PromptSelection& s) {
  if (s.pooling < 1 || s.pooling % 2 == 0) throw std::invalid_argument("select_and_compact: the pooling kernel must be odd and positive");
  if (s.keep <= 0 || s.recent < 0) throw std::invalid_argument("select_and_compact: keep must be positive, recent not negative");
  std::vector<float> row(static_cast<std::size_t>(s.tokens)), pooled(row.size());
  for (int head = 0; head < shape.kv_heads; ++head) {
    for (int t = 0; t < s.tokens; ++t) row[t] = *scores.at(s.score_table, t, head);
    const float* ranked = row.data();
    if (s.pooling > 1) {
      snapkv_scores(row.data(), 1, 1, s.tokens, s.pooling, pooled.data());
      ranked = pooled.data();
    }
    const std::vector<int> kept = select_tokens(ranked, s.tokens, s.keep, 0, s.recent);
    compact_head(k_cache, shape, s.block_table, head, kept);
    compact_head(v_cache, shape, s.block_table, head, kept);
    if (s.move_scores) {
      compact([&](int logical) { return scores.at(s.score_table, logical, head); }, sizeof(float), kept);
    }
  }
}

void promote_leaving_token(std::uint8_t* k_cache, std::uint8_t* v_cache, const PagedShape& shape, const PagedScores& scores,
                           const std::int32_t* block_table, int heavy, int leaving) {
  const std::size_t bytes = shape.format.vector_bytes();
  auto vector = [&](std::uint8_t* cache, int logical, int head) {
    return cache + shape.offset(block_table[logical / shape.block_size], logical % shape.block_size, head);
  };
  for (int head = 0; head < shape.kv_heads; ++head) {
    int lowest = -1;
    for (int t = 0; t < heavy; ++t) {
      if (lowest < 0 || *scores.at(block_table, t, head) < *scores.at(block_table, lowest, head)) lowest = t;
    }
    if (lowest < 0 || !(*scores.at(block_table, leaving, head) > *scores.at(block_table, lowest, head))) continue;
    std::memcpy(vector(k_cache, lowest, head), vector(k_cache, leaving, head), bytes);
    std::memcpy(vector(v_cache, lowest, head), vector(v_cache, leaving, head), bytes);
    *scores.at(block_table, lowest, head) = *scores.at(block_table, leaving, head);
  }
}

void promote_leaving_tokens(std::uint8_t* k_cache, std::uint8_t* v_cache, const PagedShape& shape, const PagedScores& scores,
                            const LeavingTokens& t) {
  for (int i = 0; i < t.sequences; ++i) {
    promote_leaving_token(k_cache, v_cache, shape, scores, t.block_tables + static_cast<std::size_t>(i) * t.max_blocks_per_seq,
                          t.heavy[i], t.leaving[i]);
  }
}

}  // namespace memtwin::kernels
