#pragma once
// KV data and formats the kernel tests share.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/kv_format.h"
#include "kernels/kivi_paged.h"
#include "kernels/kv_kernels.h"

namespace memtwin::test {

// KV with realistic statistics: mostly small values and a few outlier channels 10-50x larger, as
// KIVI and KVQuant describe for keys.
inline std::vector<float> synthetic_kv(std::size_t vectors, int head_dim, std::uint32_t seed, bool outliers) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> scale(head_dim, 1.f);
  if (outliers) {
    for (int c = 0; c < head_dim; c += 37) scale[c] = 10.f + (c % 41);
  }
  std::vector<float> x(vectors * head_dim);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = normal(rng) * scale[i % head_dim];
  return x;
}

inline memtwin::kernels::KvFormat format(memtwin::kernels::KvElement e, int head_dim = 128, int group = 32) {
  memtwin::kernels::KvFormat f;
  f.element = e;
  f.head_dim = head_dim;
  f.group = group;
  return f;
}

// Vectors of head_dim values as a cache of format f holds them: each quantised and dequantised.
inline std::vector<float> as_cached(const std::vector<float>& x, const memtwin::kernels::KvFormat& f) {
  std::vector<float> out(x.size());
  std::vector<std::uint8_t> bytes(f.vector_bytes());
  for (std::size_t at = 0; at < x.size(); at += static_cast<std::size_t>(f.head_dim)) {
    memtwin::kernels::quantize_vector(&x[at], f, bytes.data());
    memtwin::kernels::dequantize_vector(bytes.data(), f, &out[at]);
  }
  return out;
}

// The query as the integer key scores take it: round_query_to_bytes in groups of `group`,
// reconstructed as scale x (high + low / 256).
inline std::vector<float> rounded_query(const std::vector<float>& q, int group) {
  std::vector<std::int8_t> high(q.size()), low(q.size());
  std::vector<float> scales(q.size() / static_cast<std::size_t>(group)), out(q.size());
  memtwin::kernels::round_query_to_bytes(q.data(), static_cast<int>(q.size()), group, high.data(), low.data(), scales.data());
  for (std::size_t i = 0; i < q.size(); ++i) out[i] = scales[i / static_cast<std::size_t>(group)] * (high[i] + low[i] / 256.f);
  return out;
}

// One sequence's cache of `shape` holding x's vectors (one a token and KV head) in token order, its
// blocks in order (table: 0, 1, 2, ...).
inline std::vector<std::uint8_t> contiguous_cache(const memtwin::kernels::PagedShape& shape, const std::vector<float>& x) {
  std::vector<std::uint8_t> cache(shape.bytes());
  std::vector<std::int64_t> slots(static_cast<std::size_t>(shape.num_blocks) * shape.block_size);
  for (std::size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<std::int64_t>(i);
  memtwin::kernels::write_paged(x.data(), slots.data(), static_cast<int>(slots.size()), shape, cache.data());
  return cache;
}

// How far decode attention's integer V pass may move an output from exact weights (kv_kernels.h,
// kIntegerWeightTile): the tile over 65534 times the largest range (max - min) of any quantisation
// group among the cached values `cached` (as_cached), with a little room for the floats' rounding.
inline double integer_weight_bound(const std::vector<float>& cached, const memtwin::kernels::KvFormat& f) {
  double range = 0;
  for (std::size_t at = 0; at < cached.size(); at += static_cast<std::size_t>(f.group)) {
    float low = cached[at], high = cached[at];
    for (int i = 1; i < f.group; ++i) {
      low = std::min(low, cached[at + i]);
      high = std::max(high, cached[at + i]);
    }
    range = std::max(range, static_cast<double>(high) - low);
  }
  return memtwin::kernels::kIntegerWeightTile / 65534.0 * range * (1 + 1e-3);
}

// How far KIVI's integer K pass may move decode attention's outputs (kivi_paged.h,
// kKiviKeyWeightRun), for one sequence: each score of a whole key group moves by at most delta =
// scale x run / 65534 x sum over runs of max_c |q_c| range_c (range_c: the span of channel c's
// cached keys in the group), so each probability by a factor within exp(+-2 delta) and each output
// by at most (exp(2 delta) - 1) max |v|. query [q_heads][head_dim]; keys and values as cached,
// [tokens][kv_heads][head_dim].
inline double kivi_integer_key_bound(const float* query, const float* keys, const float* values, int tokens,
                                     const memtwin::kernels::KiviPagedShape& s, int q_heads, float scale) {
  const int hd = s.head_dim, G = s.group, gqa = q_heads / s.kv_heads, run = memtwin::kernels::kKiviKeyWeightRun;
  const std::size_t row = static_cast<std::size_t>(s.kv_heads) * hd;
  double delta = 0, largest_value = 0;
  for (std::int64_t g = 0; g < s.quantized_tokens(tokens) / G; ++g)
    for (int head = 0; head < q_heads; ++head) {
      const int kvh = head / gqa;
      double sum = 0;
      for (int first = 0; first < hd; first += run) {
        double largest = 0;
        for (int c = first; c < first + run; ++c) {
          float low = keys[g * G * row + kvh * hd + c], high = low;
          for (int t = 1; t < G; ++t) {
            const float k = keys[(g * G + t) * row + kvh * hd + c];
            low = std::min(low, k);
            high = std::max(high, k);
          }
          largest = std::max(largest, std::fabs(static_cast<double>(query[static_cast<std::size_t>(head) * hd + c])) * (high - low));
        }
        sum += largest;
      }
      delta = std::max(delta, scale * run / 65534.0 * sum * (1 + 1e-3));
    }
  for (std::size_t i = 0; i < static_cast<std::size_t>(tokens) * row; ++i)
    largest_value = std::max(largest_value, static_cast<double>(std::fabs(values[i])));
  return std::expm1(2 * delta) * largest_value;
}

}  // namespace memtwin::test
