#pragma once
// KV data and formats the kernel tests share.
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/kv_format.h"

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

}  // namespace memtwin::test
