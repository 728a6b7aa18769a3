// Benchmark (not a test): KV kernels' throughput as bytes moved per second and as a fraction of the
// device's copy bandwidth measured in the same run (a STREAM-like copy on the CPU, a device-to-device
// copy on the GPU), for contexts 1K-128K and batches 1-64, Llama-3-8B attention shape
// (32 query heads, 8 KV heads, head_dim 128). Warm-up, then the median of timed repeats.
// Then decode attention on one thread at 8K context, every format KIVI's included, against the
// fractions of copy bandwidth the project targets, and against the fraction the multiply-adds
// alone allow on this core (its fp32 multiply-add rate measured in the same run).
//   memtwin_kernels_bench [--device cpu|cuda] [--quick]
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tools/bench_workloads.h"
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

using namespace memtwin::bench;

namespace {

// memcpy of 256 MiB, read + write bytes per second, the median of `repeats` copies.
class CopyBandwidth {
 public:
  double measure(int repeats) {
    const double t = seconds_per_run([&] { std::memcpy(to_.data(), from_.data(), kBytes); }, 1, repeats);
    return 2.0 * kBytes / t;
  }

 private:
  static constexpr std::size_t kBytes = std::size_t{256} << 20;
  std::vector<char> from_ = std::vector<char>(kBytes, 1), to_ = std::vector<char>(kBytes, 0);
};

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// fp32 multiply-adds per second on one thread, with the vectors the kernels use: twelve independent
// chains of FMAs (more than the FMA's latency times its throughput), kept in registers by an empty
// asm that the compiler cannot see through. The best of three runs of 20 M rounds.
#define MEMTWIN_FMA_RATE(V, FMA, SET1, LANES)                                                                     \
  const V x = SET1(0.999999f), y = SET1(1e-7f);                                                                  \
  const long rounds = 20'000'000;                                                                                \
  double best = 0;                                                                                               \
  for (int repeat = 0; repeat < 3; ++repeat) {                                                                   \
    V a0 = x, a1 = y, a2 = x, a3 = y, a4 = x, a5 = y, a6 = x, a7 = y, a8 = x, a9 = y, a10 = x, a11 = y;          \
    const auto start = Clock::now();                                                                             \
    for (long k = 0; k < rounds; ++k) {                                                                          \
      a0 = FMA(a0, x, y), a1 = FMA(a1, x, y), a2 = FMA(a2, x, y), a3 = FMA(a3, x, y), a4 = FMA(a4, x, y);         \
      a5 = FMA(a5, x, y), a6 = FMA(a6, x, y), a7 = FMA(a7, x, y), a8 = FMA(a8, x, y), a9 = FMA(a9, x, y);         \
      a10 = FMA(a10, x, y), a11 = FMA(a11, x, y);                                                                \
      __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));                         \
      __asm__ volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));                       \
    }                                                                                                            \
    best = std::max(best, 12.0 * rounds * (LANES) / std::chrono::duration<double>(Clock::now() - start).count()); \
  }                                                                                                              \
  return best;
__attribute__((target("avx512f"))) double fma512_rate() { MEMTWIN_FMA_RATE(__m512, _mm512_fmadd_ps, _mm512_set1_ps, 16) }
__attribute__((target("avx2,fma"))) double fma256_rate() { MEMTWIN_FMA_RATE(__m256, _mm256_fmadd_ps, _mm256_set1_ps, 8) }
#undef MEMTWIN_FMA_RATE
#endif

// The multiply-adds per second of the kernels' level on this CPU; 0 where not measured (portable).
double cpu_multiply_adds_per_second(SimdLevel level) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (level >= SimdLevel::avx512) return fma512_rate();
  if (level == SimdLevel::avx2) return fma256_rate();
#endif
  (void)level;
  return 0;
}

// One thread, 8K context, batch 1: each format's bytes read per second as a fraction of the copy
// bandwidth, against the targets (fp16 60%, int8 50%, int4 40%, KIVI-4 30%), and the fraction its
// fp32 multiply-adds alone allow: decode attention does 2 x (query heads per KV head) x head_dim of
// them per token and KV head (the scores and the weighted values) whatever the format, so at the
// core's rate a format of b bytes per token and KV head reaches at most b / (that time) / copy;
// half of them where the scores are integer dot products (SimdLevel::avx512_vnni, int8 and int4).
// In rounds: each measures the copy bandwidth, then every format, so that a fraction divides two
// figures taken within a second of each other (on a shared VM both drift by tens of percent within
// minutes); a format's figures are the medians over the rounds.
void bench_cpu_single_thread(CopyBandwidth& copy) {
#ifdef _OPENMP
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
#endif
  constexpr int kRounds = 5, kCalls = 11;
  const int context = 8192;
  const double multiply_adds = 2.0 * (kQHeads / kKvHeads) * kHeadDim * context * kKvHeads;
  const double rate = cpu_multiply_adds_per_second(cpu_simd_level());
  if (rate > 0) {
    std::printf("cpu fp32 multiply-add rate, one thread (%s FMAs): %.1f G/s; decode attention's %.0f M multiply-adds at "
                "context %d take at least %.0f us\n",
                simd_level_name(cpu_simd_level()), rate / 1e9, multiply_adds / 1e6, context, multiply_adds / rate * 1e6);
  }
  struct Row {
    std::string name;
    std::function<void()> run;
    double bytes, target, fp32_multiply_adds;
    std::vector<double> seconds, fractions;
  };
  std::vector<Row> rows;
  std::vector<Workload> paged;
  paged.reserve(4);
  for (auto [e, target] : {std::pair{KvElement::fp16, 0.6}, {KvElement::fp8, 0.0}, {KvElement::int8, 0.5}, {KvElement::int4, 0.4}}) {
    Workload& w = paged.emplace_back(make_workload(e, context, 1));
    const DecodeAttentionArgs a = w.args();
    const bool integer_scores = scores_against_rounded_query(a, cpu_simd_level());
    rows.push_back({element_name(e), [a] { decode_attention(a); }, w.kv_bytes(), target,
                    integer_scores ? multiply_adds / 2 : multiply_adds, {}, {}});
    if (integer_scores) {  // beside it, the same call with fp32 scores (the AVX-512 level)
      rows.push_back({std::string(element_name(e)) + "/fp32", [a] { decode_attention(a, SimdLevel::avx512); }, w.kv_bytes(), 0.0,
                      multiply_adds, {}, {}});
    }
  }
  std::vector<std::unique_ptr<KiviWorkload>> kivi;
  using Kivi = std::tuple<int, const char*, double>;
  for (auto [bits, name, target] : {Kivi{4, "kivi-4", 0.3}, Kivi{2, "kivi-2", 0.0}}) {
    const KiviWorkload& w = *kivi.emplace_back(make_kivi_workload(bits, context));
    rows.push_back({name, [&w] { kivi_decode_attention(w.args); }, w.kv_bytes, target, multiply_adds, {}, {}});
  }
  std::vector<double> copies;
  for (int round = 0; round < kRounds; ++round) {
    const double bandwidth = copy.measure(3);
    copies.push_back(bandwidth);
    for (Row& r : rows) {
      const double t = seconds_per_run(r.run, 1, kCalls);
      r.seconds.push_back(t);
      r.fractions.push_back(r.bytes / t / bandwidth);
    }
  }
  std::printf("cpu decode attention, one thread, context %d, batch 1: medians of %d rounds, each the copy bandwidth (median of 3) "
              "then every format (median of %d calls); copy %.1f GB/s (%.1f-%.1f); %s kernels:\n",
              context, kRounds, kCalls, median(copies) / 1e9, *std::min_element(copies.begin(), copies.end()) / 1e9,
              *std::max_element(copies.begin(), copies.end()) / 1e9, simd_level_name(cpu_simd_level()));
  for (const Row& r : rows) {
    const double seconds = median(r.seconds), fraction = median(r.fractions);
    std::printf("  %-9s %9.1f us %7.1f GB/s %5.0f%% of copy (%.0f-%.0f%%)", r.name.c_str(), seconds * 1e6, r.bytes / seconds / 1e9,
                100 * fraction, 100 * *std::min_element(r.fractions.begin(), r.fractions.end()),
                100 * *std::max_element(r.fractions.begin(), r.fractions.end()));
    if (r.target > 0) std::printf("  (target %.0f%%: %s)", 100 * r.target, fraction >= r.target ? "met" : "not met");
    if (rate > 0) {
      std::printf("  fp32 multiply-adds allow %.0f%%%s", 100 * r.bytes / (r.fp32_multiply_adds / rate) / median(copies),
                  r.fp32_multiply_adds < multiply_adds ? " (scores in integers)" : "");
    }
    std::printf("\n");
  }
#ifdef _OPENMP
  omp_set_num_threads(threads);
#endif
}

// Decode attention (int8, 8K context, batch 1) on every thread OpenMP gives, per-call times while
// another thread of this process keeps a core busy, as other work on a shared machine would: with
// a team waiting at every call's end for a thread that lost its core, one call in several took a
// scheduler slice (kernels/cpu/thread_policy.h). Printed beside the same calls on an idle machine.
void bench_cpu_under_load() {
#ifdef _OPENMP
  if (omp_get_max_threads() < 2) return;
  Workload w = make_workload(KvElement::int8, 8192, 1);
  auto a = w.args();
  auto per_call = [&](const char* label) {
    std::vector<double> us;
    for (int i = 0; i < 200; ++i) us.push_back(seconds_per_run([&] { decode_attention(a); }, 0, 1) * 1e6);
    std::sort(us.begin(), us.end());
    std::printf("  %-34s median %7.0f us, p90 %7.0f us, slowest %7.0f us\n", label, us[us.size() / 2], us[us.size() * 9 / 10],
                us.back());
  };
  std::printf("cpu decode attention per call, int8, context 8192, batch 1, %d threads (200 calls):\n", omp_get_max_threads());
  per_call("idle machine");
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    volatile unsigned long spin = 0;
    while (!stop.load(std::memory_order_relaxed)) spin = spin + 1;
  });
  per_call("another thread keeping a core busy");
  stop = true;
  busy.join();
#endif
}

void bench_cpu(bool quick) {
  CopyBandwidth copy_bandwidth;
  const double copy = copy_bandwidth.measure(9);
  std::printf("cpu copy bandwidth (memcpy 256 MiB, read+write, median of 9): %.1f GB/s\n", copy / 1e9);
  bench_cpu_single_thread(copy_bandwidth);
  bench_cpu_under_load();
  std::printf("%-6s %-5s %8s %6s %12s %10s %8s %10s\n", "device", "kv", "context", "batch", "time_us", "GB/s", "of_copy",
              "vs_fp16");
  for (int context : quick ? std::vector<int>{1024, 8192} : std::vector<int>{1024, 8192, 32768, 131072}) {
    for (int batch : {1, 8}) {
      double fp16_time = 0;
      for (KvElement e : {KvElement::fp16, KvElement::fp8, KvElement::int8, KvElement::int4}) {
        KvFormat f;
        f.element = e;
        const double bytes = 2.0 * context * batch * kKvHeads * static_cast<double>(f.vector_bytes());
        if (bytes > 3e9) continue;  // this machine's memory
        Workload w = make_workload(e, context, batch);
        auto a = w.args();
        const double t = seconds_per_run([&] { decode_attention(a); }, 1, quick ? 2 : 3);
        if (e == KvElement::fp16) fp16_time = t;
        std::printf("%-6s %-5s %8d %6d %12.1f %10.1f %7.0f%% %9.2fx\n", "cpu", element_name(e), context, batch, t * 1e6,
                    w.kv_bytes() / t / 1e9, 100 * w.kv_bytes() / t / copy, fp16_time > 0 ? fp16_time / t : 0.0);
      }
    }
  }
  // Quantise throughput: a prefill's K written into a paged cache (write_paged: quantise and
  // scatter, both cores), bytes of fp32 input read plus quantised bytes written.
  for (KvElement e : {KvElement::fp16, KvElement::fp8, KvElement::int8, KvElement::int4, KvElement::int2}) {
    KvFormat f;
    f.element = e;
    const int tokens = 8192;
    PagedShape shape{tokens / 16, 16, kKvHeads, f};
    std::vector<float> x(static_cast<std::size_t>(tokens) * kKvHeads * kHeadDim);  // KV-like values, not a constant
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.f, 1.f);
    for (auto& v : x) v = normal(rng);
    std::vector<std::int64_t> slots(tokens);
    for (int t = 0; t < tokens; ++t) slots[t] = t;
    HostBuffer cache(shape.bytes());
    const double t = seconds_per_run([&] { write_paged(x.data(), slots.data(), tokens, shape, cache.data()); }, 1, 3);
    const double bytes = static_cast<double>(tokens) * kKvHeads * (kHeadDim * 4.0 + static_cast<double>(f.vector_bytes()));
    std::printf("cpu quantise %s (write_paged, %d tokens x %d heads): %.2f GB/s (%.0f%% of copy)\n", element_name(e), tokens,
                kKvHeads, bytes / t / 1e9, 100 * bytes / t / copy);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = "cpu";
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--device" && i + 1 < argc) device = argv[++i];
    else if (arg == "--quick") quick = true;
    else {
      std::fprintf(stderr, "usage: memtwin_kernels_bench [--device cpu|cuda] [--quick]\n");
      return 2;
    }
  }
  if (device == "cpu") {
    bench_cpu(quick);
    return 0;
  }
#ifdef MEMTWIN_WITH_CUDA
  if (device == "cuda") {
    bench_cuda(quick);
    return 0;
  }
#endif
  std::fprintf(stderr, "device '%s' is not available in this build (cpu%s)\n", device.c_str(),
#ifdef MEMTWIN_WITH_CUDA
               ", cuda"
#else
               ""
#endif
  );
  return 2;
}
