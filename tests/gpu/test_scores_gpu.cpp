// [gpu] tests of the serving engine's score-based eviction on the GPU (kernels/cuda/paged_scores.cu)
// against the CPU kernels on the same cache: decode attention's probabilities, paged-score
// accumulation and clearing, selection with compaction (H2O's and SnapKV's), H2O's per-step
// eviction, and the parts of H2O's prompt scores around its QK^T product. Probabilities and sums
// differ in rounding (fast math, atomics), selections and moved bytes not.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/kv_cuda.h"
#include "kernels/eviction.h"
#include "kernels/kv_kernels.h"
#include "tests/gpu/gpu_check.h"

namespace memtwin::gpu_test {
namespace {

using namespace memtwin::kernels;

constexpr int kKvHeads = 2, kQHeads = 4, kHeadDim = 64, kBlockSize = 16, kBlocks = 12, kTokens = 150;

struct Cache {
  PagedShape shape;
  std::vector<std::int32_t> table;
  std::vector<std::uint8_t> k, v;
  explicit Cache(KvElement element) {
    shape.num_blocks = kBlocks;
    shape.block_size = kBlockSize;
    shape.kv_heads = kKvHeads;
    shape.format.element = element;
    shape.format.head_dim = kHeadDim;
    for (int b = 0; b < kBlocks; ++b) table.push_back((b * 5 + 7) % kBlocks);  // scattered
    k.resize(shape.bytes());
    v.resize(shape.bytes());
    std::mt19937 rng(element == KvElement::fp8 ? 3 : 4);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> x(static_cast<std::size_t>(kTokens) * kKvHeads * kHeadDim);
    std::vector<std::int64_t> slots(kTokens);
    for (int t = 0; t < kTokens; ++t) slots[t] = static_cast<std::int64_t>(table[t / kBlockSize]) * kBlockSize + t % kBlockSize;
    for (auto& e : x) e = normal(rng);
    write_paged(x.data(), slots.data(), kTokens, shape, k.data());
    for (auto& e : x) e = normal(rng);
    write_paged(x.data(), slots.data(), kTokens, shape, v.data());
  }
};

std::vector<float> random_scores(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<float> s(n);
  for (auto& x : s) x = u(rng);
  return s;
}

double worst_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
  return worst;
}

void probabilities_and_scores(KvElement element) {
  Cache c(element);
  const std::string name = element == KvElement::fp8 ? "fp8" : "fp16";
  const int rows = 3;
  std::vector<std::int32_t> tables, context = {1, 77, kTokens};
  for (int r = 0; r < rows; ++r) tables.insert(tables.end(), c.table.begin(), c.table.end());
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> query(static_cast<std::size_t>(rows) * kQHeads * kHeadDim);
  for (auto& x : query) x = normal(rng);
  const int stride = kBlocks * kBlockSize;
  std::vector<float> cpu_probs(static_cast<std::size_t>(rows) * kQHeads * stride, 0.f);
  auto a = make_decode_args(query.data(), c.k.data(), c.v.data(), tables.data(), context.data(), nullptr, rows, kQHeads, kBlocks, c.shape);
  a.probs = cpu_probs.data();
  a.probs_stride = stride;
  decode_attention(a, false);
  float* dq = to_device(query);
  std::uint8_t* dk = to_device(c.k);
  std::int32_t* dt = to_device(tables);
  std::int32_t* dc = to_device(context);
  float* dp = to_device(std::vector<float>(cpu_probs.size(), 0.f));
  auto d = a;
  d.query = dq, d.k_cache = dk, d.v_cache = dk, d.block_tables = dt, d.context_lens = dc, d.probs = dp;
  cuda::attention_probabilities(d);
  const auto gpu_probs = to_host(dp, cpu_probs.size());
  double worst = 0;
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < kQHeads; ++h)
      for (int t = 0; t < context[r]; ++t) {
        const std::size_t i = (static_cast<std::size_t>(r) * kQHeads + h) * stride + t;
        worst = std::max(worst, static_cast<double>(std::fabs(gpu_probs[i] - cpu_probs[i])));
      }
  expect(worst < 1e-5, name + " attention probabilities within 1e-5 of the CPU's (" + std::to_string(worst) + ")");
  // The probabilities into paged scores, after clearing the slots of the last rows' tokens.
  auto scores = random_scores(static_cast<std::size_t>(kBlocks) * kBlockSize * kKvHeads, 5);
  float* ds = to_device(scores);
  PagedScores cpu{scores.data(), kBlockSize, kKvHeads}, gpu{ds, kBlockSize, kKvHeads};
  std::vector<std::int64_t> cleared = {c.table[0] * kBlockSize + 3, -1, c.table[9] * kBlockSize + 5};
  for (std::int64_t slot : cleared)
    if (slot >= 0) std::fill_n(scores.data() + slot * kKvHeads, kKvHeads, 0.f);
  std::int64_t* dslots = to_device(cleared);
  cuda::clear_scores(gpu, dslots, static_cast<int>(cleared.size()));
  accumulate_paged_scores(cpu_probs.data(), rows, kQHeads, stride, tables.data(), kBlocks, context.data(), cpu);
  cuda::accumulate_paged_scores(dp, rows, kQHeads, stride, dt, kBlocks, dc, gpu);
  expect(worst_difference(to_host(ds, scores.size()), scores) < 1e-5, name + " paged scores cleared and accumulated as on the CPU");
  for (void* p : {static_cast<void*>(dq), static_cast<void*>(dk), static_cast<void*>(dt), static_cast<void*>(dc),
                  static_cast<void*>(dp), static_cast<void*>(ds), static_cast<void*>(dslots)})
    cudaFree(p);
}

void selection_and_eviction() {
  for (int pooling : {1, 7}) {
    Cache c(KvElement::fp16);
    auto scores = random_scores(static_cast<std::size_t>(kBlocks) * kBlockSize * kKvHeads, 11 + pooling);
    std::uint8_t* dk = to_device(c.k);
    std::uint8_t* dv = to_device(c.v);
    float* ds = to_device(scores);
    std::int32_t* dt = to_device(c.table);
    PromptSelection s;
    s.block_table = s.score_table = c.table.data();
    s.tokens = kTokens;
    s.keep = 60;
    s.recent = 12;
    s.pooling = pooling;
    s.move_scores = pooling == 1;  // H2O moves its scores with the tokens; SnapKV's are scratch
    select_and_compact(c.k.data(), c.v.data(), c.shape, PagedScores{scores.data(), kBlockSize, kKvHeads}, s);
    PromptSelection d = s;
    d.block_table = d.score_table = dt;
    cuda::select_and_compact(dk, dv, c.shape, PagedScores{ds, kBlockSize, kKvHeads}, d);
    const std::string what = pooling == 1 ? "H2O's" : "SnapKV's";
    expect(to_host(dk, c.k.size()) == c.k && to_host(dv, c.v.size()) == c.v, what + " selection compacts the CPU's K and V bytes");
    expect(to_host(ds, scores.size()) == scores, what + " scores after selection are the CPU's");
    // H2O's step: the token leaving the recent window against the heavy hitters, per head (a
    // batch of one sequence, three steps).
    const std::vector<std::int32_t> heavy = {48};
    std::int32_t* dh = to_device(heavy);
    for (int leaving : {50, 55, 59}) {
      promote_leaving_token(c.k.data(), c.v.data(), c.shape, PagedScores{scores.data(), kBlockSize, kKvHeads}, c.table.data(), 48,
                            leaving);
      std::int32_t* dl = to_device(std::vector<std::int32_t>{leaving});
      cuda::promote_leaving_tokens(dk, dv, c.shape, PagedScores{ds, kBlockSize, kKvHeads}, LeavingTokens{dt, 0, dh, dl, 1});
      cudaFree(dl);
    }
    expect(to_host(dk, c.k.size()) == c.k && to_host(ds, scores.size()) == scores,
           what + " cache after three H2O evictions is the CPU's");
    // One step of three sequences at once: the table's blocks split into three tables of four.
    const std::vector<std::int32_t> counts = {40, 30, 50}, leavings = {60, 45, 63};
    LeavingTokens host{c.table.data(), 4, counts.data(), leavings.data(), 3};
    promote_leaving_tokens(c.k.data(), c.v.data(), c.shape, PagedScores{scores.data(), kBlockSize, kKvHeads}, host);
    std::int32_t* dcounts = to_device(counts);
    std::int32_t* dleavings = to_device(leavings);
    cuda::promote_leaving_tokens(dk, dv, c.shape, PagedScores{ds, kBlockSize, kKvHeads}, LeavingTokens{dt, 4, dcounts, dleavings, 3});
    expect(to_host(dk, c.k.size()) == c.k && to_host(dv, c.v.size()) == c.v && to_host(ds, scores.size()) == scores,
           what + " cache after a batched H2O step of three sequences is the CPU's");
    for (void* p : {static_cast<void*>(dh), static_cast<void*>(dcounts), static_cast<void*>(dleavings)}) cudaFree(p);
    for (void* p : {static_cast<void*>(dk), static_cast<void*>(dv), static_cast<void*>(ds), static_cast<void*>(dt)}) cudaFree(p);
  }
}

void prompt_scores_around_the_product() {
  Cache c(KvElement::fp16);
  // The keys as the GPU gathers them equal the CPU's dequantisation.
  std::uint8_t* dk = to_device(c.k);
  std::int32_t* dt = to_device(c.table);
  float* dkeys = to_device(std::vector<float>(static_cast<std::size_t>(kTokens) * kHeadDim));
  cuda::gather_keys(dk, c.shape, dt, 1, kTokens, dkeys);
  std::vector<float> keys(static_cast<std::size_t>(kTokens) * kHeadDim);
  for (int t = 0; t < kTokens; ++t)
    dequantize_vector(c.k.data() + c.shape.offset(c.table[t / kBlockSize], t % kBlockSize, 1), c.shape.format, &keys[t * kHeadDim]);
  expect(to_host(dkeys, keys.size()) == keys, "gathered keys equal the CPU's dequantisation");
  // Logits of 20 query rows at positions 130..149: each row's causal softmax added to the scores.
  const int rows = 20, first = kTokens - rows;
  auto logits = random_scores(static_cast<std::size_t>(rows) * kTokens, 21);
  std::vector<float> scores(static_cast<std::size_t>(kBlocks) * kBlockSize * kKvHeads, 0.f);
  PagedScores cpu{scores.data(), kBlockSize, kKvHeads};
  for (int r = 0; r < rows; ++r) {
    const int seen = first + r + 1;
    double sum = 0;
    for (int t = 0; t < seen; ++t) sum += std::exp(logits[static_cast<std::size_t>(r) * kTokens + t]);
    for (int t = 0; t < seen; ++t)
      *cpu.at(c.table.data(), t, 1) += static_cast<float>(std::exp(logits[static_cast<std::size_t>(r) * kTokens + t]) / sum);
  }
  float* dl = to_device(logits);
  float* ds = to_device(std::vector<float>(scores.size(), 0.f));
  cuda::add_causal_softmax(dl, rows, kTokens, first, dt, 1, PagedScores{ds, kBlockSize, kKvHeads});
  expect(worst_difference(to_host(ds, scores.size()), scores) < 1e-5, "causal softmax rows added to the scores as on the CPU");
  for (void* p : {static_cast<void*>(dk), static_cast<void*>(dt), static_cast<void*>(dkeys), static_cast<void*>(dl),
                  static_cast<void*>(ds)})
    cudaFree(p);
}

}  // namespace

void score_kernels_match_cpu() {
  for (KvElement e : {KvElement::fp16, KvElement::fp8}) probabilities_and_scores(e);
  selection_and_eviction();
  prompt_scores_around_the_product();
}

}  // namespace memtwin::gpu_test
