#pragma once
// Microbenchmarks of the host device, measured the nccl-tests way: every rank runs them at once
// (as every GPU of a node would), each with warm-up runs, then timed repeats for at least a minimum
// time, and a correctness count of results that differ from the expected value. They call the same
// kernels and collectives the plan executor uses (HostKernels, MpiCollectives), so the calibrated
// simulator and the measured run time the same code.
#include <cstdint>
#include <string>
#include <vector>

namespace memtwin::hw {

struct RateSample {
  std::string what;    ///< "gemm 512x1536x512", "all_gather 4 MiB", ...
  double size = 0;     ///< FLOPs or bytes per call
  double seconds = 0;  ///< per call, slowest rank
  double rate = 0;     ///< size / seconds (bus bandwidth for collectives)
};

struct HostCalibration {
  int ranks = 1;
  std::string cpu;                  ///< /proc/cpuinfo's model name
  std::vector<RateSample> gemm, attention, collectives;
  /// Decode attention over a paged cache per KV format and working set: cached K and V elements
  /// per second (`what` is the format, `size` the cache bytes the batch reads).
  std::vector<RateSample> decode_attention;
  /// Paged-cache writes of new tokens (quantise and scatter) per KV format: elements per second.
  std::vector<RateSample> kv_write;
  double gemm_best_flops = 0, gemm_median_flops = 0;
  std::vector<std::pair<int, double>> gemm_median_by_rows;  ///< rows -> median rate over the shapes
  double attention_median_flops = 0;
  std::vector<RateSample> weight_streaming;  ///< batch-1..8 GEMMs: weight bytes read per second
  double weight_streaming_bytes_per_s = 0;   ///< their median
  double stream_bytes_per_s = 0;    ///< read + write traffic
  double copy_bytes_per_s = 0;      ///< bytes copied per second
  double adam_params_per_s = 0;     ///< per rank
  double collective_bus_bytes_per_s = 0;  ///< all-gather bus bandwidth at the largest size
  double collective_step_latency_s = 0;   ///< per ring step, from the smallest size
  std::int64_t runtime_bytes = 0;   ///< resident memory of a rank ready to run (largest rank)
  std::int64_t wrong_results = 0;   ///< correctness count over all checks
};

/// Runs on every rank of MPI_COMM_WORLD (collective); the result is the same on every rank.
/// `min_seconds` is the least time each timed measurement runs.
HostCalibration calibrate_host(double min_seconds = 0.2);

}  // namespace memtwin::hw
