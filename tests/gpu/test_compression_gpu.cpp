// [gpu] tests of the compression kernels: KIVI's per-channel keys and the eviction support, each
// against the CPU kernel on the same input. The CUDA kernels do the CPU's arithmetic in the CPU's
// order, so most comparisons are exact.
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/kv_cuda.h"
#include "kernels/eviction.h"
#include "kernels/kivi.h"
#include "kernels/kv_kernels.h"
#include "tests/gpu/gpu_check.h"

namespace memtwin::gpu_test {
namespace {

using namespace memtwin::kernels;

// Rows that each sum to one (softmax of random logits).
std::vector<float> distributions(int rows, int tokens, unsigned seed) {
  auto v = random_floats(static_cast<std::size_t>(rows) * tokens, seed, 2.f);
  for (int r = 0; r < rows; ++r) {
    float* row = v.data() + static_cast<std::size_t>(r) * tokens;
    double sum = 0;
    for (int t = 0; t < tokens; ++t) sum += row[t] = std::exp(row[t]);
    for (int t = 0; t < tokens; ++t) row[t] = static_cast<float>(row[t] / sum);
  }
  return v;
}

void kivi_keys_match(int bits) {
  const int blocks = 6, group = 32, head_dim = 128;
  auto keys = random_floats(static_cast<std::size_t>(blocks) * group * head_dim, 11 + bits);
  for (int b = 0; b < blocks; ++b)  // an outlier channel, as KIVI describes
    for (int t = 0; t < group; ++t) keys[(static_cast<std::size_t>(b) * group + t) * head_dim + 5] *= 30.f;
  const std::size_t block_bytes = static_cast<std::size_t>(head_dim) * ((group * bits + 7) / 8 + 4);
  std::vector<std::uint8_t> cpu(blocks * block_bytes);
  for (int b = 0; b < blocks; ++b)
    quantize_keys_per_channel(keys.data() + static_cast<std::size_t>(b) * group * head_dim, group, head_dim, bits,
                              cpu.data() + b * block_bytes);
  float* dk = to_device(keys);
  std::uint8_t* dq = to_device(std::vector<std::uint8_t>(cpu.size()));
  cuda::quantize_keys_per_channel(dk, blocks, group, head_dim, bits, dq);
  expect(to_host(dq, cpu.size()) == cpu, "KIVI keys, " + std::to_string(bits) + " bits: the CUDA bytes equal the CPU's");
  cuda::dequantize_keys_per_channel(dq, blocks, group, head_dim, bits, dk);
  std::vector<float> back(static_cast<std::size_t>(group) * head_dim);
  const auto gpu = to_host(dk, keys.size());
  bool same = true;
  for (int b = 0; b < blocks; ++b) {
    dequantize_keys_per_channel(cpu.data() + b * block_bytes, group, head_dim, bits, back.data());
    for (std::size_t i = 0; i < back.size(); ++i) same = same && back[i] == gpu[b * back.size() + i];
  }
  expect(same, "KIVI keys, " + std::to_string(bits) + " bits: dequantised equal");
  cudaFree(dk);
  cudaFree(dq);
}

void eviction_scores_match() {
  const int q_heads = 8, kv_heads = 2, tokens = 1000, window = 32;
  const auto probs = distributions(q_heads, tokens, 3);
  std::vector<float> cpu_scores = random_floats(static_cast<std::size_t>(kv_heads) * tokens, 4);
  float* dp = to_device(probs);
  float* ds = to_device(cpu_scores);
  accumulate_attention(probs.data(), q_heads, kv_heads, tokens, cpu_scores.data());
  cuda::accumulate_attention(dp, q_heads, kv_heads, tokens, ds);
  expect(to_host(ds, cpu_scores.size()) == cpu_scores, "H2O accumulated scores equal");

  const auto attention = distributions(q_heads * window, tokens, 5);
  std::vector<float> cpu_votes(static_cast<std::size_t>(q_heads) * tokens);
  float* da = to_device(attention);
  float* dv = to_device(cpu_votes);
  snapkv_scores(attention.data(), q_heads, window, tokens, 7, cpu_votes.data());
  cuda::snapkv_scores(da, q_heads, window, tokens, 7, dv);
  expect(to_host(dv, cpu_votes.size()) == cpu_votes, "SnapKV pooled votes equal");

  std::vector<float> cpu_entropy(q_heads);
  float* de = to_device(cpu_entropy);
  attention_entropy(probs.data(), q_heads, tokens, cpu_entropy.data());
  cuda::attention_entropy(dp, q_heads, tokens, de);
  const auto gpu_entropy = to_host(de, q_heads);
  double worst = 0;
  for (int h = 0; h < q_heads; ++h) worst = std::max(worst, std::fabs(static_cast<double>(gpu_entropy[h] - cpu_entropy[h])) / cpu_entropy[h]);
  expect(worst < 1e-6, "attention entropy: relative difference " + std::to_string(worst));

  // The kept tokens, including ties (scores rounded to few values) broken towards the older token.
  std::vector<float> coarse(cpu_votes.begin(), cpu_votes.begin() + tokens);
  for (auto& x : coarse) x = std::round(x * 2000.f);
  for (const auto& scores : {std::vector<float>(cpu_votes.begin(), cpu_votes.begin() + tokens), coarse}) {
    const auto cpu_kept = select_tokens(scores.data(), tokens, 300, 4, 32);
    float* dscores = to_device(scores);
    std::int32_t* dkept = to_device(std::vector<std::int32_t>(tokens));
    const int n = cuda::select_tokens(dscores, tokens, 300, 4, 32, dkept);
    const auto gpu_kept = to_host(dkept, n);
    expect(std::vector<int>(gpu_kept.begin(), gpu_kept.end()) == cpu_kept, "select_tokens keeps the CPU's tokens");
    cudaFree(dscores);
    cudaFree(dkept);
  }
  for (void* p : {static_cast<void*>(dp), static_cast<void*>(ds), static_cast<void*>(da), static_cast<void*>(dv),
                  static_cast<void*>(de)})
    cudaFree(p);
}

void compaction_matches(KvElement element) {
  KvFormat f;
  f.element = element;
  PagedShape shape{24, 16, 4, f};
  const int tokens = 300, head = 2;
  std::vector<std::int32_t> table(24);
  for (int i = 0; i < 24; ++i) table[i] = (i * 7) % 24;
  std::vector<std::uint8_t> cache(shape.bytes());
  std::mt19937 rng(13);
  for (auto& b : cache) b = static_cast<std::uint8_t>(rng());
  std::vector<int> kept;
  for (int t = 0; t < tokens; ++t)
    if (t < 4 || t % 3 == 1 || t >= tokens - 16) kept.push_back(t);
  std::uint8_t* dc = to_device(cache);
  std::int32_t* dt = to_device(table);
  std::int32_t* dk = to_device(std::vector<std::int32_t>(kept.begin(), kept.end()));
  compact_head(cache.data(), shape, table.data(), head, kept);
  cuda::compact_head(dc, shape, dt, head, dk, static_cast<int>(kept.size()));
  expect(to_host(dc, cache.size()) == cache, "compact_head moves the same bytes as the CPU");
  std::vector<std::int32_t> descending = {0, 5, 3};
  std::int32_t* dd = to_device(descending);
  bool refused = false;
  try {
    cuda::compact_head(dc, shape, dt, head, dd, 3);
  } catch (const std::invalid_argument&) {
    refused = true;
  }
  expect(refused && to_host(dc, cache.size()) == cache, "compact_head refuses descending positions and moves nothing");
  for (void* p : {static_cast<void*>(dc), static_cast<void*>(dt), static_cast<void*>(dk), static_cast<void*>(dd)}) cudaFree(p);
}

}  // namespace

void compression_kernels_match_cpu() {
  for (int bits : {2, 4, 8}) kivi_keys_match(bits);
  eviction_scores_match();
  for (KvElement e : {KvElement::fp16, KvElement::fp8, KvElement::int4}) compaction_matches(e);
}

}  // namespace memtwin::gpu_test
