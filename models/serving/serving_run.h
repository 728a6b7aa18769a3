#pragma once
// What a serving run produced, request by request and iteration by iteration: filled in by the
// simulator (sim/serving_simulation.h) and by the hardware backend's engine (hw/host), read by one
// report (serving_report.h), so both give the same result fields by construction.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "models/serving/iteration_ops.h"
#include "models/serving/value_runs.h"

namespace memtwin {

struct RequestRecord {
  std::int64_t id = 0;
  int replica = 0;
  int prompt_tokens = 0, output_tokens = 0;
  double arrival_s = 0, first_token_s = -1, finish_s = -1;  ///< finish_s -2: rejected
  int preemptions = 0, swaps = 0;
  int prefix_group = -1, prefix_tokens = 0;  ///< the shared prefix the prompt starts with, if any
  int cached_tokens = 0;                     ///< prompt tokens found in the prefix cache (not prefilled)
  /// Disaggregated serving: when its prefill completed on the prefill instance, and the KV bytes
  /// sent to its decode instance (all the instance's GPUs) and how long they took.
  double prefilled_s = -1, kv_transfer_bytes = 0, kv_transfer_s = 0;
};

struct ServingRun {
  std::vector<RequestRecord> requests;  ///< in id order
  ValueRuns inter_token_s;              ///< every gap between consecutive output tokens (tens of millions: as runs)
  double makespan_s = 0;
  double last_arrival_s = 0;
  std::int64_t peak_blocks_used = 0;
  std::int64_t capacity_blocks = 0;
  std::int64_t preemptions = 0, swaps = 0, rejected = 0;
  std::int64_t iterations = 0;
  /// Replica 0 after each iteration: KV occupancy and the host-tier traffic so far.
  struct KvSample {
    double time_s = 0;
    double utilization = 0;          ///< KV blocks used / capacity
    double swap_out_bytes = 0;       ///< cumulative bytes swapped out to host memory
    double swap_in_bytes = 0;        ///< cumulative bytes brought back
    // Cached prefixes in the tiers (the run's cumulative traffic, per GPU; replica 0's occupancy).
    double prefix_to_host_bytes = 0, prefix_from_host_bytes = 0, prefix_from_nvme_bytes = 0, prefix_to_nvme_bytes = 0;
    double host_tier_bytes = 0, nvme_tier_bytes = 0;
  };
  /// At most kMaxKvSamples samples, evenly spread: every kv_sample_stride-th iteration (the stride
  /// doubles, and every other sample is dropped, each time the timeline fills), so a run of any
  /// length keeps a bounded timeline.
  std::vector<KvSample> kv_timeline;
  std::int64_t kv_sample_stride = 1;
  static constexpr std::size_t kMaxKvSamples = std::size_t{1} << 20;
  void record_kv_sample(std::int64_t iteration, const KvSample& sample) {
    if (iteration % kv_sample_stride != 0) return;
    kv_timeline.push_back(sample);
    if (kv_timeline.size() < kMaxKvSamples) return;
    for (std::size_t i = 0; 2 * i < kv_timeline.size(); ++i) kv_timeline[i] = kv_timeline[2 * i];
    kv_timeline.resize((kv_timeline.size() + 1) / 2);
    kv_sample_stride *= 2;
  }
  struct Iteration {
    int replica = 0;
    double start_s = 0, end_s = 0;
    int decode = 0, prefill_tokens = 0;
  };
  std::vector<Iteration> iteration_log;  ///< the first kMaxLoggedIterations, for the trace
  static constexpr std::size_t kMaxLoggedIterations = 200000;
  double swap_bytes = 0;
  std::int64_t swap_space_full = 0;       ///< swap preemptions recomputed instead: the swap space was full
  double peak_swap_bytes = 0;             ///< most bytes in one GPU's swap space at once
  std::int64_t prefix_cache_evictions = 0;  ///< cached prefixes that left the GPU to make room
  /// Cached prefixes moved between KV tiers (bytes), and the fullest each lower tier got.
  double prefix_offload_bytes = 0, prefix_fetch_host_bytes = 0, prefix_fetch_nvme_bytes = 0, prefix_nvme_write_bytes = 0;
  double host_tier_peak_bytes = 0, nvme_tier_peak_bytes = 0;
  std::int64_t prefixes_dropped = 0;  ///< left every tier (recomputed when next needed)
  /// Every iteration's compute by kind of work: priced (simulator) or timed (a device whose
  /// kernels can be timed one call at a time); all zero where not known.
  IterationOpSeconds op_seconds;
  /// The simulator: the kinds of work its iterations planned (iteration_plan.h expands them to ops).
  IterationOpKinds planned_op_kinds = 0;
  /// A hardware engine: the signature of every op it executed (iteration_plan.h), call by call.
  std::set<std::string> executed_ops;

  /// Its times counted from `origin`: a run that began at `origin` on a clock it shared with other
  /// work (a serving job among others, sim/job_simulation.h) reads as a run of its own.
  void count_times_from(double origin) {
    auto shift = [origin](double& t) {
      if (t >= 0) t -= origin;  // -1 (never) and -2 (rejected) are not times
    };
    for (RequestRecord& r : requests) {
      shift(r.arrival_s);
      shift(r.first_token_s);
      shift(r.finish_s);
      shift(r.prefilled_s);
    }
    for (KvSample& k : kv_timeline) k.time_s -= origin;
    for (Iteration& it : iteration_log) {
      it.start_s -= origin;
      it.end_s -= origin;
    }
    makespan_s -= origin;
    last_arrival_s -= origin;
  }
};

}  // namespace memtwin
