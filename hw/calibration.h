#pragma once
// A device's calibration, measured the nccl-tests way (warm-up, timed repeats, a correctness
// count): what `memtwin calibrate` writes into the file the simulator reads
// (`cluster.calibration: FILE`). The host device measures it in hw/host/host_calibration.cpp, a
// GPU in the CUDA module (hw/cuda/cuda_calibration.cu), with the kernels and libraries each
// device's runs use, so that the calibrated simulator and the measured run time the same code.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace memtwin::hw {

struct RateSample {
  std::string what;    ///< "gemm 512x1536x512", "all_gather 4 MiB", ...
  double size = 0;     ///< FLOPs or bytes per call
  double seconds = 0;  ///< per call, slowest rank
  double rate = 0;     ///< size / seconds (bus bandwidth for collectives)
};

struct DeviceCalibration {
  int ranks = 1;
  std::string device;                ///< "host CPU <model>", or the GPU's name
  std::string method;                ///< how it was measured, one line for the file's header
  std::string gemm_precision = "fp32";  ///< the GEMM samples' precision: the gpu.flops key they set
  std::vector<RateSample> gemm, attention, collectives;
  /// Decode attention over a paged cache per KV format and working set: cached K and V elements
  /// per second (`what` is the format, `size` the cache bytes the batch reads).
  std::vector<RateSample> decode_attention;
  /// Paged-cache writes of new tokens (quantise and scatter) per KV format: elements per second.
  std::vector<RateSample> kv_write;
  /// Prompt scoring of the methods that accumulate attention scores (KvSelection::accumulated_scores:
  /// the prompt's attention probabilities summed per key, once per layer):
  /// causal query-key pairs x query heads per second. 0: not measured.
  double prompt_scoring_pairs_per_s = 0;
  double gemm_best_flops = 0, gemm_median_flops = 0;
  std::vector<std::pair<int, double>> gemm_median_by_rows;  ///< rows -> median rate over the shapes
  std::string gemm_rows_method = "median GEMM rate / best, by the rows (tokens) multiplied";
  double attention_median_flops = 0;
  double fp32_flops = 0;                     ///< best fp32 GEMM rate when the samples are not fp32 (0: none)
  std::vector<RateSample> weight_streaming;  ///< batch-1..8 GEMMs: weight bytes read per second
  double weight_streaming_bytes_per_s = 0;   ///< their median
  /// Weight GEMMs from DRAM timed whole at 1 to 64 rows: rows -> weight bytes per second (median
  /// over the shapes), arithmetic included; empty when not measured.
  std::vector<std::pair<int, double>> weight_gemm_by_rows;
  /// The same per weight shape: ((inner, outputs), rows -> weight bytes per second).
  std::vector<std::pair<std::pair<int, int>, std::vector<std::pair<int, double>>>> weight_gemm_by_shape;
  std::string weight_streaming_method = "memory-bound GEMMs (batch 1-8) read weights at this fraction of it";
  /// How far a 32-row GEMM from DRAM overlaps reading its weights with its arithmetic (efficiency.
  /// gemm_overlap: 1, the longer of the two; 0, their sum); negative when not measured.
  double gemm_overlap = -1;
  std::string gemm_overlap_method =
      "a 32-row GEMM from memory overlaps its weight reads and arithmetic this far (1: the longer, 0: the sum)";
  double stream_bytes_per_s = 0;    ///< device memory traffic (read + write) per second
  double copy_bytes_per_s = 0;      ///< over the host link (a memcpy on the host device)
  std::string copy_method;          ///< how copy_bytes_per_s was measured
  double adam_params_per_s = 0;     ///< per rank, on the CPU (0: not measured)
  /// The NVMe tier's file I/O per rank, every rank at once (0: not measured).
  double nvme_read_bytes_per_s = 0, nvme_write_bytes_per_s = 0;
  double collective_bus_bytes_per_s = 0;  ///< all-gather bus bandwidth at the largest size (0: one rank)
  double collective_step_latency_s = 0;   ///< per ring step, from the smallest size
  std::int64_t runtime_bytes = 0;   ///< memory in use on a rank ready to run (largest rank)
  std::string runtime_method;       ///< what runtime_bytes counts
  bool host_device = false;         ///< the host device: its runtime holds the collectives' buffers too
  std::int64_t wrong_results = 0;   ///< correctness count over all checks
};

/// The median of the samples' rates (0 when there are none).
inline double median_rate(const std::vector<RateSample>& samples) {
  std::vector<double> rates;
  for (const auto& s : samples) rates.push_back(s.rate);
  std::sort(rates.begin(), rates.end());
  return rates.empty() ? 0 : rates[rates.size() / 2];
}

}  // namespace memtwin::hw
