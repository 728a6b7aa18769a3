#include "hw/cuda/cuda_kv_calibration.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "hw/cuda/cuda_check.h"
#include "hw/cuda/cuda_timing.cuh"
#include "kernels/cuda/kv_cuda.h"

namespace memtwin::hw {
namespace {

// Device memory for one measurement, freed when it goes out of scope (a failed check throws).
template <class T>
class DeviceArray {
 public:
  /// `count` zeroed elements.
  explicit DeviceArray(std::size_t count) : bytes_(std::max<std::size_t>(count, 1) * sizeof(T)) {
    check(cudaMalloc(&data_, bytes_), "cudaMalloc (calibration)");
    check(cudaMemset(data_, 0, bytes_), "cudaMemset");
  }
  /// A copy of `host`.
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    check(cudaMemcpy(data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  [[nodiscard]] T* get() const { return data_; }

 private:
  std::size_t bytes_;
  T* data_ = nullptr;
};

// Block tables 0, 1, 2, ...: each sequence's blocks one after another.
std::vector<std::int32_t> identity(int n) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

// A decode batch's metadata on the device: its block tables and every sequence's context length.
struct Batch {
  DeviceArray<std::int32_t> tables, lens;
  Batch(int blocks, int seqs, int context)
      : tables(identity(blocks)), lens(std::vector<std::int32_t>(static_cast<std::size_t>(seqs), context)) {}
};

// The first output element is finite, else a wrong result is counted.
void count_if_wrong(DeviceCalibration& c, const float* out) {
  float first = 0;
  check(cudaMemcpy(&first, out, sizeof first, cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (!std::isfinite(first)) ++c.wrong_results;
}

constexpr int kKvHeads = 8, kQHeads = 32, kHeadDim = 128;  // a Llama-3-8B layer's attention

}  // namespace

// Decode attention per format over batches whose cached K and V range from 16 MiB to 1 GiB (8 KV
// heads of 128, GQA groups of 4), and a prefill's paged writes.
void measure_kv_kernels(DeviceCalibration& c, double min_seconds) {
  using kernels::KvElement;
  for (auto [element, format] : {std::pair{KvElement::fp16, "fp16"}, {KvElement::fp8, "fp8"}, {KvElement::int8, "int8"},
                                 {KvElement::int4, "int4"}, {KvElement::int2, "int2"}}) {
    kernels::PagedShape shape;
    shape.block_size = 16;
    shape.kv_heads = kKvHeads;
    shape.format.element = element;
    shape.format.head_dim = kHeadDim;
    shape.format.group = 32;
    for (auto [seqs, context] : {std::pair{8, 1024}, {32, 4096}, {64, 16384}}) {
      const int per_seq = context / shape.block_size;
      shape.num_blocks = seqs * per_seq;
      if (2.0 * static_cast<double>(shape.bytes()) > 4e9) continue;
      DeviceArray<std::uint8_t> k(shape.bytes()), v(shape.bytes());
      DeviceArray<float> query(static_cast<std::size_t>(seqs) * kQHeads * kHeadDim), out(static_cast<std::size_t>(seqs) * kQHeads * kHeadDim);
      const Batch batch(shape.num_blocks, seqs, context);
      const auto a = kernels::make_decode_args(query.get(), k.get(), v.get(), batch.tables.get(), batch.lens.get(), out.get(), seqs,
                                               kQHeads, per_seq, shape);
      DeviceArray<std::uint8_t> workspace(kernels::cuda::workspace_bytes(a, 512));
      const double s = seconds_per_call([&] { kernels::cuda::decode_attention(a, workspace.get(), 512); }, min_seconds / 2);
      count_if_wrong(c, out.get());
      const double elements = 2.0 * seqs * context * kKvHeads * kHeadDim;
      c.decode_attention.push_back({format, 2.0 * static_cast<double>(shape.bytes()), s, elements / s});
      if (seqs != 8) continue;
      // A prefill's worth of new tokens (4096) written into the cache, K and V.
      constexpr int written = 4096;
      DeviceArray<float> values(static_cast<std::size_t>(written) * kKvHeads * kHeadDim);
      std::vector<std::int64_t> host_slots(written);
      for (int t = 0; t < written; ++t) host_slots[static_cast<std::size_t>(t)] = t * 7L % (shape.num_blocks * shape.block_size);
      const DeviceArray<std::int64_t> slots(host_slots);
      const double w = seconds_per_call(
          [&] {
            kernels::cuda::write_paged(values.get(), slots.get(), written, shape, k.get());
            kernels::cuda::write_paged(values.get(), slots.get(), written, shape, v.get());
          },
          min_seconds / 2);
      const double written_elements = 2.0 * written * kKvHeads * kHeadDim;
      c.kv_write.push_back({format, written_elements, w, written_elements / w});
    }
  }
}

// KIVI's CUDA kernels (kernels/cuda/kivi_paged.cu) as the host calibration measures them: decode
// attention over batches of quantised groups only ("kivi2", "kivi4") and of fp16 residual only
// ("kivi_fp16"), 8 KV heads of 128, GQA groups of 4; and the append one token per sequence over G
// steps, each sequence quantising one group from its staged residual ("kv_write.kivi*"). Caches
// of zeros: groups of scale and zero point 0, residual halves 0.
void measure_kivi_kernels(DeviceCalibration& c, double min_seconds) {
  kernels::KiviPagedShape shape;
  shape.block_size = 32;
  shape.kv_heads = kKvHeads;
  shape.head_dim = kHeadDim;
  auto decode = [&](const std::string& name, int seqs, int context) {
    const int per_seq = static_cast<int>((shape.sequence_bytes(context) + shape.slice_bytes() - 1) / shape.slice_bytes());
    shape.num_blocks = seqs * per_seq;
    const DeviceArray<std::uint8_t> cache(shape.bytes());
    DeviceArray<float> query(static_cast<std::size_t>(seqs) * kQHeads * kHeadDim), out(static_cast<std::size_t>(seqs) * kQHeads * kHeadDim);
    const Batch batch(shape.num_blocks, seqs, context);
    const auto a = kernels::make_kivi_decode_args(query.get(), cache.get(), batch.tables.get(), batch.lens.get(), out.get(), seqs,
                                                  kQHeads, per_seq, shape);
    DeviceArray<float> workspace(kernels::cuda::kivi_workspace_bytes(a, context) / sizeof(float));
    const double s = seconds_per_call([&] { kernels::cuda::kivi_decode_attention(a, workspace.get(), context); }, min_seconds / 2);
    count_if_wrong(c, out.get());
    const double elements = 2.0 * seqs * context * kKvHeads * kHeadDim;
    c.decode_attention.push_back({name, static_cast<double>(seqs) * static_cast<double>(shape.sequence_bytes(context)), s, elements / s});
  };
  for (int bits : {2, 4}) {
    shape.bits = bits;
    shape.residual = 0;
    for (auto [seqs, context] : {std::pair{8, 1024}, {32, 4096}, {64, 16384}}) decode("kivi" + std::to_string(bits), seqs, context);
    // The append: 64 sequences whose residual is full (R + G - 1 tokens of R = 128), G steps.
    constexpr int seqs = 64;
    shape.residual = 128;
    const int context = shape.residual + shape.group;
    const int per_seq = static_cast<int>((shape.sequence_bytes(context - 1) + shape.slice_bytes() - 1) / shape.slice_bytes());
    shape.num_blocks = seqs * per_seq;
    const std::size_t staged_halves = static_cast<std::size_t>(context) * shape.residual_token_bytes() / 2;
    const DeviceArray<std::uint8_t> cache(shape.bytes());
    const DeviceArray<std::uint16_t> staging(staged_halves * seqs);
    const DeviceArray<float> values(static_cast<std::size_t>(seqs) * kKvHeads * kHeadDim);
    std::vector<std::int32_t> first(seqs), held(static_cast<std::size_t>(seqs) * shape.group);  // step j: R + j tokens held
    std::vector<const std::uint16_t*> staged(seqs);
    for (int q = 0; q < seqs; ++q) first[static_cast<std::size_t>(q)] = q, staged[static_cast<std::size_t>(q)] = staging.get() + q * staged_halves;
    for (int j = 0; j < shape.group; ++j) std::fill_n(held.begin() + j * seqs, seqs, shape.residual + j);
    const DeviceArray<std::int32_t> tables(identity(shape.num_blocks)), ones(std::vector<std::int32_t>(seqs, 1)), d_first(first),
        d_held(held);
    const DeviceArray<const std::uint16_t*> d_staged(staged);
    auto step = kernels::make_kivi_append_args(values.get(), values.get(), seqs, d_first.get(), ones.get(), d_held.get(),
                                               tables.get(), per_seq, shape, cache.get());
    step.staged = d_staged.get();
    const double w = seconds_per_call(
        [&] {
          for (int j = 0; j < shape.group; ++j) {
            step.cached = d_held.get() + j * seqs;
            kernels::cuda::kivi_append(step);
          }
        },
        min_seconds / 2);
    const double written = 2.0 * seqs * shape.group * kKvHeads * kHeadDim;
    c.kv_write.push_back({"kivi" + std::to_string(bits), written, w, written / w});
  }
  shape.residual = 16384;
  for (auto [seqs, context] : {std::pair{8, 1024}, {32, 4096}}) decode("kivi_fp16", seqs, context);
}

}  // namespace memtwin::hw
