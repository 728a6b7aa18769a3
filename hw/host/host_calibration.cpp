#include "hw/host/host_calibration.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <fstream>

#include <cblas.h>

#include "hw/host/host_kernels.h"
#include "hw/host/host_serving_kernels.h"
#include "kernels/kivi_paged.h"
#include "kernels/kv_kernels.h"
#include "hw/host/mpi_collectives.h"
#include "hw/host/nvme_file.h"
#include "hw/process_memory.h"

namespace memtwin::hw {
namespace {

using Clock = std::chrono::steady_clock;

double elapsed(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// An array in device memory as the serving engine's caching allocator takes it (host_device_memory:
// page-aligned, huge pages for large ones): OpenBLAS's packing on Intel CPUs runs a third slower
// over cache-line-aligned weights than over malloc's 16-byte offset, and the decode kernels faster
// over huge pages, so the engine's GEMMs and KV caches are timed on device memory.
template <class T>
class DeviceArray {
 public:
  DeviceArray(std::size_t count, T value) : raw_(host_device_memory()), count_(count) {
    data_ = static_cast<T*>(raw_.allocate(static_cast<std::int64_t>(count * sizeof(T))));
    if (!data_) throw std::runtime_error("host calibration: cannot allocate " + std::to_string(count * sizeof(T)) + " bytes");
    std::fill(data_, data_ + count, value);
  }
  ~DeviceArray() { raw_.release(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  [[nodiscard]] T* data() const { return data_; }
  [[nodiscard]] T* begin() const { return data_; }
  [[nodiscard]] T* end() const { return data_ + count_; }

 private:
  RawMemory raw_;
  T* data_ = nullptr;
  std::size_t count_;
};
using DeviceFloats = DeviceArray<float>;
using DeviceBytes = DeviceArray<std::uint8_t>;

double slowest(double v) {
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  return v;
}

// Seconds per call of `run`: two warm-up calls, then five timed windows of at least
// `min_seconds` / 5 each, all ranks at once; the median window's figure (a window disturbed by
// another tenant of a shared machine does not move it), the slowest rank's.
template <class F>
double seconds_per_call(F&& run, double min_seconds) {
  run();
  run();
  check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  std::vector<double> windows;
  for (int w = 0; w < 5; ++w) {
    const auto start = Clock::now();
    long calls = 0;
    do {
      run();
      ++calls;
    } while (elapsed(start) < min_seconds / 5);
    windows.push_back(elapsed(start) / static_cast<double>(calls));
  }
  std::sort(windows.begin(), windows.end());
  return slowest(windows[windows.size() / 2]);
}

// The same for a collective: every rank must make the same number of calls, so the count comes
// from a timed trial agreed on by all.
template <class F>
double seconds_per_collective(F&& run, double min_seconds) {
  run();
  check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  auto start = Clock::now();
  run();
  const double trial = slowest(elapsed(start));
  const long calls = std::max(3L, static_cast<long>(std::ceil(min_seconds / std::max(trial, 1e-7))));
  check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  start = Clock::now();
  for (long i = 0; i < calls; ++i) run();
  return slowest(elapsed(start) / static_cast<double>(calls));
}

std::string cpu_model() {
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}


// KIVI's decode attention (kernels/kivi_paged.h) over batches of the same sizes as the other
// formats', and one more that is well past a 32 MiB L3 (the engine reads KV after a pass of
// weights has evicted it): "kivi2"/"kivi4" with every token in quantised groups
// (residual 0), "kivi_fp16" with every token in the fp16 residual; the model weighs the two by
// each iteration's residual tokens. A batch's sequences hold the same bytes (copied from the first).
void measure_kivi_decode(DeviceCalibration& c, const std::string& name, kernels::KiviPagedShape shape, double min_seconds,
                         std::initializer_list<std::pair<int, int>> batches) {
  for (auto [seqs, context] : batches) {
    const int per_seq = static_cast<int>((shape.sequence_bytes(context) + shape.slice_bytes() - 1) / shape.slice_bytes());
    shape.num_blocks = seqs * per_seq;
    DeviceBytes cache(shape.bytes(), 0);
    std::vector<std::int32_t> tables(static_cast<std::size_t>(shape.num_blocks)), lens(static_cast<std::size_t>(seqs), context);
    for (int b = 0; b < shape.num_blocks; ++b) tables[static_cast<std::size_t>(b)] = b;
    const std::size_t row = static_cast<std::size_t>(shape.kv_heads) * shape.head_dim;
    std::vector<float> kv(static_cast<std::size_t>(context) * row);
    for (std::size_t i = 0; i < kv.size(); ++i) kv[i] = 0.01f * static_cast<float>(i % 97);
    const std::int32_t first = 0, none = 0;
    kernels::kivi_append(kernels::make_kivi_append_args(kv.data(), kv.data(), 1, &first, &lens[0], &none, tables.data(), per_seq,
                                                        shape, cache.data()));
    const std::size_t sequence = static_cast<std::size_t>(per_seq) * shape.slice_bytes();
    for (int q = 1; q < seqs; ++q) std::copy_n(cache.begin(), sequence, cache.begin() + static_cast<long>(q * sequence));
    // Blocks scattered through the pool, as a running engine's are (every slice holds groups, or
    // every one residual tokens, so any block reads as valid data at any position).
    std::shuffle(tables.begin(), tables.end(), std::mt19937(17));
    std::vector<float> query(static_cast<std::size_t>(seqs) * row, 0.01f), out(query.size());
    const auto d = kernels::make_kivi_decode_args(query.data(), cache.data(), tables.data(), lens.data(), out.data(), seqs,
                                                  shape.kv_heads, per_seq, shape);
    const double s = seconds_per_call([&] { kernels::kivi_decode_attention(d); }, min_seconds / 2);
    if (!std::isfinite(out[0])) ++c.wrong_results;
    const double elements = 2.0 * seqs * context * static_cast<double>(row);
    c.decode_attention.push_back({name, static_cast<double>(seqs) * static_cast<double>(shape.sequence_bytes(context)), s, elements / s});
  }
}

// KIVI's append, as decoding runs it: one token per sequence for G steps from the residual's
// fullest (R + G - 1 tokens), so that each sequence quantises one group.
void measure_kivi_append(DeviceCalibration& c, const std::string& name, kernels::KiviPagedShape shape, double min_seconds) {
  constexpr int seqs = 16;
  const int context = shape.residual + shape.group;
  const int per_seq = static_cast<int>((shape.sequence_bytes(context - 1) + shape.slice_bytes() - 1) / shape.slice_bytes());
  shape.num_blocks = seqs * per_seq;
  DeviceBytes cache(shape.bytes(), 0);
  std::vector<std::int32_t> tables(static_cast<std::size_t>(shape.num_blocks));
  for (int b = 0; b < shape.num_blocks; ++b) tables[static_cast<std::size_t>(b)] = b;
  const std::size_t row = static_cast<std::size_t>(shape.kv_heads) * shape.head_dim;
  std::vector<float> kv(static_cast<std::size_t>(seqs) * row);
  for (std::size_t i = 0; i < kv.size(); ++i) kv[i] = 0.01f * static_cast<float>(i % 97);
  std::vector<std::int32_t> first(seqs), one(seqs, 1), held(seqs);
  for (int q = 0; q < seqs; ++q) first[static_cast<std::size_t>(q)] = q;
  const auto step = kernels::make_kivi_append_args(kv.data(), kv.data(), seqs, first.data(), one.data(), held.data(), tables.data(),
                                                   per_seq, shape, cache.data());
  const double w = seconds_per_call(
      [&] {
        for (int j = 0; j < shape.group; ++j) {
          std::fill(held.begin(), held.end(), context - shape.group + j);
          kernels::kivi_append(step);
        }
      },
      min_seconds / 2);
  const double written = 2.0 * seqs * shape.group * static_cast<double>(row);
  c.kv_write.push_back({name, written, w, written / w});
}

// H2O's prompt scoring as the serving engine runs it: a 256-token prompt in one chunk against an
// fp16 paged cache of 8 KV heads of 64 channels, 8 query heads (QK^T, the causal softmax, the sums
// into the paged scores). The rate counts causal pairs as the iteration model does (chunk^2 / 2).
void measure_prompt_scoring(DeviceCalibration& c, double min_seconds) {
  constexpr int prompt = 256, heads = 8, head_dim = 64;
  kernels::PagedShape shape;
  shape.block_size = 16;
  shape.kv_heads = heads;
  shape.format = {kernels::KvElement::fp16, head_dim, 32};
  shape.num_blocks = prompt / shape.block_size;
  DeviceBytes k(shape.bytes(), 0);
  std::vector<std::int32_t> table(static_cast<std::size_t>(shape.num_blocks));
  for (int b = 0; b < shape.num_blocks; ++b) table[static_cast<std::size_t>(b)] = b;
  std::vector<float> queries(static_cast<std::size_t>(prompt) * heads * head_dim);
  for (std::size_t i = 0; i < queries.size(); ++i) queries[i] = 0.01f * static_cast<float>(i % 89);
  std::vector<float> score_data(static_cast<std::size_t>(shape.num_blocks) * shape.block_size * heads, 0.0f);
  const kernels::PagedScores scores{score_data.data(), shape.block_size, heads};
  HostServingKernels device;
  const double s = seconds_per_call(
      [&] {
        device.score_prompt(queries.data(), heads * head_dim, prompt, 0, heads, shape, k.data(), table.data(), scores,
                            table.data());
      },
      min_seconds / 2);
  if (!std::isfinite(score_data[0])) ++c.wrong_results;
  c.prompt_scoring_pairs_per_s = static_cast<double>(prompt) * prompt / 2 * heads / s;
}

void calibrate_kivi(DeviceCalibration& c, double min_seconds) {
  for (int head_dim : {128, 64}) {
    const std::string suffix = head_dim == 128 ? "" : "_hd64";
    kernels::KiviPagedShape shape;
    shape.block_size = 32;
    shape.kv_heads = 8;
    shape.head_dim = head_dim;
    for (int bits : {2, 4}) {
      shape.bits = bits;
      shape.residual = 0;
      measure_kivi_decode(c, "kivi" + std::to_string(bits) + suffix, shape, min_seconds, {{4, 64}, {8, 256}, {16, 1024}, {64, 2048}});
      shape.residual = 128;
      if (head_dim == 128) measure_kivi_append(c, "kivi" + std::to_string(bits), shape, min_seconds);
    }
    shape.residual = 1024;
    measure_kivi_decode(c, "kivi_fp16" + suffix, shape, min_seconds, {{4, 64}, {8, 256}, {16, 1024}, {32, 1024}});
  }
}

}  // namespace

DeviceCalibration calibrate_host(double min_seconds) {
  MpiSession& mpi = MpiSession::get();
  use_one_core();
  DeviceCalibration c;
  c.ranks = mpi.size;
  c.device = "host CPU " + cpu_model() + ", " + std::to_string(mpi.size) + " rank(s)";
  c.method = "Every rank measured at once, one OpenBLAS thread each; figures are the slowest rank's.";
  c.copy_method = "a host-device \"PCIe\" copy is a memcpy";
  c.host_device = true;
  c.runtime_method = "resident memory of a rank ready to run: process, MPI, kernel workspace, staging buffers";
  HostKernels kernels;

  // GEMMs of transformer layers: tokens x (hidden -> hidden, hidden -> MLP, MLP -> hidden,
  // hidden -> vocabulary slice), and attention's per-head score and value products.
  // Rows (tokens) from a small decode-and-prefill batch to a training micro-batch.
  for (std::int64_t m : {8, 16, 32, 64, 128, 256, 512, 1024}) {
    std::vector<RateSample> same_rows;
    for (auto [k, n] : {std::pair<std::int64_t, std::int64_t>{512, 512}, {512, 1408}, {1408, 512}, {512, 4096}, {1024, 1024}}) {
      GemmShape g{m, n, k, 1};
      const double s = seconds_per_call([&] { kernels.gemm(g); }, min_seconds / 4);
      const float expected = static_cast<float>(k) * 0.01f * 0.01f;
      if (std::abs(kernels.last_gemm_output() - expected) > 1e-3f * expected) ++c.wrong_results;
      c.gemm.push_back({"gemm " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k), g.flops(), s,
                        g.flops() / s});
      same_rows.push_back(c.gemm.back());
    }
    c.gemm_median_by_rows.emplace_back(static_cast<int>(m), median_rate(same_rows));
  }
  for (std::int64_t seq : {256, 512, 1024}) {
    for (GemmShape g : {GemmShape{seq, seq, 64, 1}, GemmShape{seq, 64, seq, 1}}) {
      const double s = seconds_per_call([&] { kernels.gemm(g); }, min_seconds / 4);
      c.attention.push_back({"attention " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k),
                             g.flops(), s, g.flops() / s});
    }
  }
  for (const auto& g : c.gemm) c.gemm_best_flops = std::max(c.gemm_best_flops, g.rate);
  c.gemm_median_flops = median_rate(c.gemm);
  c.attention_median_flops = median_rate(c.attention);

  // GEMMs as a serving iteration runs them: 1 to 64 rows against weight matrices of transformer
  // shapes, cycling through enough copies (256 MiB) that the weights come from DRAM. OpenBLAS packs
  // the weights (one pass over them from DRAM), then multiplies: one after the other, so a GEMM's
  // time is its weight reads plus its arithmetic. Per shape, the reads are the intercept of the
  // least-squares line through the times by rows and the arithmetic its slope; the model adds the
  // two (efficiency.gemm_overlap 0) and takes the arithmetic's rate as the efficiency up to 64 rows
  // (the cache-resident GEMMs above, whose packing comes from cache, count from 128 rows, where
  // the reads are a small part).
  constexpr int kColdRows[] = {1, 2, 4, 8, 16, 32, 64};
  std::map<int, std::vector<RateSample>> arithmetic_by_rows;
  std::map<int, std::vector<RateSample>> whole_by_rows;  // each GEMM's weight bytes / its whole time
  double worst_residual = 0;
  for (const auto& k_n : {std::pair<int, int>{512, 1536}, {512, 2816}, {1408, 512}, {512, 8192}, {2048, 2048}}) {
    const int k = k_n.first, n = k_n.second;  // plain variables: clang 14 cannot capture bindings
    const std::size_t matrix = static_cast<std::size_t>(k) * n;
    const std::size_t copies = std::max<std::size_t>(2, (std::size_t{256} << 20) / (matrix * sizeof(float)));
    const DeviceFloats weights(matrix * copies, 0.01f), rows(64 * static_cast<std::size_t>(k), 0.01f), out(64 * static_cast<std::size_t>(n), 0.0f);
    std::vector<std::pair<double, double>> times;  // (rows, seconds)
    for (int m : kColdRows) {
      std::size_t next = 0;
      times.emplace_back(m, seconds_per_call(
                                [&] {
                                  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, rows.data(), k,
                                              weights.data() + (next++ % copies) * matrix, n, 0.0f, out.data(), n);
                                },
                                min_seconds / 4));
    }
    double mean_r = 0, mean_t = 0;
    for (auto [r, t] : times) mean_r += r / times.size(), mean_t += t / times.size();
    double sxy = 0, sxx = 0;
    for (auto [r, t] : times) sxy += (r - mean_r) * (t - mean_t), sxx += (r - mean_r) * (r - mean_r);
    const double slope = sxy / sxx;
    const double reads = std::max(mean_t - slope * mean_r, 0.05 * times.front().second);
    for (auto [r, t] : times) worst_residual = std::max(worst_residual, std::abs(reads + slope * r - t) / t);
    const double bytes = static_cast<double>(matrix) * sizeof(float);
    const std::string shape = std::to_string(n) + "x" + std::to_string(k);
    c.weight_gemm_by_shape.push_back({{k, n}, {}});
    for (auto [r, t] : times) {
      whole_by_rows[static_cast<int>(r)].push_back({"gemm from memory " + std::to_string(static_cast<int>(r)) + "x" + shape, bytes, t, bytes / t});
      c.weight_gemm_by_shape.back().second.emplace_back(static_cast<int>(r), bytes / t);
    }
    c.weight_streaming.push_back({"gemm weight reads " + shape, bytes, reads, bytes / reads});
    // The arithmetic per row is the line's slope: at 8 rows what is left of a GEMM's time beyond
    // its reads is a quarter of it, so a point's own remainder would carry its noise fourfold.
    if (slope > 0) {
      const double flops_per_row = 2.0 * static_cast<double>(matrix);
      for (int r : {8, 16, 32, 64}) {
        arithmetic_by_rows[r].push_back({"gemm arithmetic " + std::to_string(r) + "x" + shape, flops_per_row * r, slope * r,
                                         flops_per_row / slope});
      }
    }
  }
  c.weight_streaming_bytes_per_s = median_rate(c.weight_streaming);
  for (const auto& [r, samples] : whole_by_rows) c.weight_gemm_by_rows.emplace_back(r, median_rate(samples));
  c.weight_streaming_method = "GEMMs from DRAM read weights at this fraction of it (the intercept of their time by rows)";
  // Up to 64 rows, the arithmetic from DRAM; from 128, the cache-resident GEMMs. The best rate
  // (gpu.flops, which every efficiency divides) is the best seen, a row count's median arithmetic
  // included: without packing from cache, the arithmetic beyond the reads runs faster than a whole
  // cache-resident GEMM.
  std::vector<std::pair<int, double>> by_rows;
  for (const auto& [rows, samples] : arithmetic_by_rows) {
    by_rows.emplace_back(rows, median_rate(samples));
    c.gemm_best_flops = std::max(c.gemm_best_flops, by_rows.back().second);  // a median: one noisy shape does not set it
  }
  for (const auto& [rows, rate] : c.gemm_median_by_rows)
    if (rows >= 128) by_rows.emplace_back(rows, rate);
  c.gemm_median_by_rows = by_rows;
  c.gemm_rows_method =
      "GEMM arithmetic rate / best, by the rows (tokens) multiplied: up to 64 rows the slope of GEMMs from DRAM by rows";
  c.gemm_overlap = 0;
  char residual[96];
  std::snprintf(residual, sizeof residual, "weights packed, then multiplied: reads + arithmetic (worst misfit %.0f%%)",
                100 * worst_residual);
  c.gemm_overlap_method = residual;

  // The decode-attention kernel the serving engine runs, per KV format, over batches whose cached
  // K and V range from cache-resident (1 MiB of fp16) to DRAM-bound (64 MiB): 8 KV heads of 128
  // channels (and of 64: FORMAT_hd64), one query per sequence.
  for (auto [element, format] : {std::pair{kernels::KvElement::fp16, "fp16"}, {kernels::KvElement::fp8, "fp8"},
                                 {kernels::KvElement::int8, "int8"}, {kernels::KvElement::int4, "int4"},
                                 {kernels::KvElement::int2, "int2"}}) {
   for (int head_dim : {128, 64}) {  // a token's fixed work weighs more at 64 (2x for int4 here)
    constexpr int kv_heads = 8;
    kernels::PagedShape shape;
    shape.block_size = 16;
    shape.kv_heads = kv_heads;
    shape.format = {element, head_dim, 32};
    const std::string name = head_dim == 128 ? std::string(format) : std::string(format) + "_hd" + std::to_string(head_dim);
    for (auto [seqs, context] : {std::pair{4, 64}, {8, 256}, {16, 1024}}) {
      const int per_seq = context / shape.block_size;
      shape.num_blocks = seqs * per_seq;
      DeviceBytes k(shape.bytes(), 0), v(shape.bytes(), 0);
      std::vector<float> query(static_cast<std::size_t>(seqs) * kv_heads * head_dim, 0.01f), out(query.size());
      std::vector<std::int32_t> tables(static_cast<std::size_t>(shape.num_blocks)), lens(static_cast<std::size_t>(seqs), context);
      for (int b = 0; b < shape.num_blocks; ++b) tables[static_cast<std::size_t>(b)] = b;
      const auto a = kernels::make_decode_args(query.data(), k.data(), v.data(), tables.data(), lens.data(), out.data(), seqs,
                                               kv_heads, per_seq, shape);
      const double s = seconds_per_call([&] { kernels::decode_attention(a); }, min_seconds / 2);
      if (!std::isfinite(out[0])) ++c.wrong_results;
      const double elements = 2.0 * seqs * context * kv_heads * head_dim;
      c.decode_attention.push_back({name, 2.0 * static_cast<double>(shape.bytes()), s, elements / s});
      if (seqs < 16 || head_dim != 128) continue;
      // Writing a prefill's worth of new tokens (512) into the largest cache, K and V.
      constexpr int written = 512;
      std::vector<float> values(static_cast<std::size_t>(written) * kv_heads * head_dim, 0.01f);
      std::vector<std::int64_t> slots(written);
      for (int t = 0; t < written; ++t) slots[static_cast<std::size_t>(t)] = t * 7 % (shape.num_blocks * shape.block_size);
      const double w = seconds_per_call(
          [&] {
            kernels::write_paged(values.data(), slots.data(), written, shape, k.data());
            kernels::write_paged(values.data(), slots.data(), written, shape, v.data());
          },
          min_seconds / 2);
      const double written_elements = 2.0 * written * kv_heads * head_dim;
      c.kv_write.push_back({format, written_elements, w, written_elements / w});
    }
   }
  }

  calibrate_kivi(c, min_seconds);
  measure_prompt_scoring(c, min_seconds);

  // Memory: 256 MiB through the streaming buffers, well past the caches' reuse.
  const double moved = 256.0 * (1 << 20);
  c.stream_bytes_per_s = moved / seconds_per_call([&] { kernels.stream(moved); }, min_seconds);
  c.copy_bytes_per_s = moved / seconds_per_call([&] { kernels.memcopy(moved); }, min_seconds);
  const double params = 4e6;
  c.adam_params_per_s = params / seconds_per_call([&] { kernels.adam(params); }, min_seconds);
  {
    // The NVMe tier as the offload copies use it: 64 MiB at a time to and from a scratch file,
    // bypassing the page cache.
    NvmeFile file;
    const std::int64_t chunk = std::int64_t{64} << 20;
    c.nvme_write_bytes_per_s = static_cast<double>(chunk) / seconds_per_call([&] { file.write(chunk); }, min_seconds);
    c.nvme_read_bytes_per_s = static_cast<double>(chunk) / seconds_per_call([&] { file.read(chunk); }, min_seconds);
  }

  // Collectives: an all-gather over every rank through the executor's own path, 1 KiB to 64 MiB.
  Plan plan;
  plan.programs.push_back({"calibration", {}});
  plan.program_of_rank.assign(static_cast<std::size_t>(mpi.size), 0);
  plan.group_of_rank.resize(static_cast<std::size_t>(mpi.size));
  std::vector<int> all;
  for (int r = 0; r < mpi.size; ++r) {
    all.push_back(r);
    plan.group_of_rank[static_cast<std::size_t>(r)]["dp"] = 0;
  }
  plan.groups["dp"] = {all};
  MpiCollectives collectives(plan, mpi.rank);
  const std::atomic<bool> never{false};
  if (mpi.size > 1) {
    for (double bytes = 1024; bytes <= 64.0 * (1 << 20); bytes *= 4) {
      Op op;
      op.kind = OpKind::collective;
      op.collective = Collective::all_gather;
      op.role = "dp";
      op.bytes_total = bytes;
      const double s = seconds_per_collective([&] { collectives.run(op, never); }, min_seconds / 4);
      // nccl-tests' bus bandwidth for all-gather: algorithm bandwidth x (n - 1) / n.
      const double bus = bytes / s * (mpi.size - 1) / mpi.size;
      c.collectives.push_back({"all_gather " + std::to_string(static_cast<long>(bytes)) + " B", bytes, s, bus});
    }
    c.collective_bus_bytes_per_s = c.collectives.back().rate;
    c.collective_step_latency_s = c.collectives.front().seconds / (mpi.size - 1);
    // Correctness: an all-reduce of each rank's number must give their sum.
    double value = mpi.rank + 1;
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    if (value != mpi.size * (mpi.size + 1) / 2.0) ++c.wrong_results;
  }
  // What a rank ready to run holds: the process, its libraries, MPI, the kernels' workspace and the
  // communicator's staging buffers.
  std::int64_t resident = resident_bytes();
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &resident, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  c.runtime_bytes = resident;
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &c.wrong_results, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  return c;
}

}  // namespace memtwin::hw
