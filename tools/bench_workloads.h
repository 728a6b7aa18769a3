#pragma once
// What the kernel benchmark's CPU and CUDA parts share (tools/bench_kernels.cpp,
// tools/bench_kernels_cuda.cpp): the Llama-3-8B attention shape, the timing rule, and the caches
// the decode kernels run over.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/host_pages.h"
#include "kernels/kivi_paged.h"
#include "kernels/kv_kernels.h"

namespace memtwin::bench {

using namespace memtwin::kernels;
using Clock = std::chrono::steady_clock;

constexpr int kQHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlock = 16;

// The median of `repeats` timed runs after `warmup` untimed ones: on a shared VM a neighbour's
// burst slows some runs by tens of percent, which a mean carries into the figure.
template <class F>
double seconds_per_run(F run, int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i) run();
  std::vector<double> seconds(static_cast<std::size_t>(repeats));
  for (double& t : seconds) {
    const auto start = Clock::now();
    run();
    t = std::chrono::duration<double>(Clock::now() - start).count();
  }
  std::nth_element(seconds.begin(), seconds.begin() + repeats / 2, seconds.end());
  return seconds[static_cast<std::size_t>(repeats / 2)];
}

// The median of a few figures (the upper one of an even count's middle two).
inline double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// A cache with `batch` sequences of `context` tokens, filled with random quantised vectors.
struct Workload {
  PagedShape shape;
  HostBuffer k{0}, v{0};  // as the host device's memory holds a KV pool (kernels/host_pages.h)
  std::vector<std::int32_t> table, context_lens;
  std::vector<float> query, out;
  int max_blocks = 0;
  DecodeAttentionArgs args() {
    return make_decode_args(query.data(), k.data(), v.data(), table.data(), context_lens.data(), out.data(),
                            static_cast<int>(context_lens.size()), kQHeads, max_blocks, shape);
  }
  [[nodiscard]] double kv_bytes() const {
    double tokens = 0;
    for (int c : context_lens) tokens += c;
    return 2 * tokens * kKvHeads * shape.format.vector_bytes();
  }
};

Workload make_workload(KvElement e, int context, int batch);

// KIVI's paged cache of one `context`-token sequence (bits 4 or 2, groups of 32, residual 128),
// filled through kivi_append with random keys and values, and decode attention's arguments over it.
struct KiviWorkload {
  KiviPagedShape shape;
  HostBuffer cache{0};
  std::vector<std::int32_t> table;
  std::vector<float> query, out;
  std::int32_t context_len = 0;
  KiviDecodeArgs args;
  double kv_bytes = 0;
};

std::unique_ptr<KiviWorkload> make_kivi_workload(int bits, int context);

/// The CUDA part (tools/bench_kernels_cuda.cpp; in builds with CUDA).
void bench_cuda(bool quick);

}  // namespace memtwin::bench
