#pragma once
// Reading nccl-tests output and fitting the collective model to it.
//
// nccl-tests (github.com/NVIDIA/nccl-tests) prints, per binary (all_reduce_perf, all_gather_perf,
// reduce_scatter_perf, alltoall_perf), a header naming the test and every rank's host, then a
// table: size (B), count, type, redop, root, then out-of-place time (us), algbw and busbw (GB/s),
// #wrong, then the same in place. `busbw = algbw x bus factor` (its doc/PERFORMANCE.md).
//
// The fit: time(size) = latency + size x bus factor / bus_bandwidth over the out-of-place rows,
// by least squares on the relative error (every size counts alike, from latency-bound to
// bandwidth-bound), per file: one collective and one group size.
#include <string>
#include <vector>

#include "models/plan/plan.h"
#include "models/scenario.h"

namespace memtwin {

struct NcclTestsRow {
  double bytes = 0;
  double seconds = 0;  ///< out of place
  int line = 0;
};

struct NcclTestsRun {
  std::string path;
  Collective collective = Collective::all_reduce;
  int ranks = 0;
  int nodes = 0;  ///< distinct hosts among the ranks
  std::vector<NcclTestsRow> rows;
};

struct NcclTestsFit {
  MeasuredCollective measured;
  double rms_relative_error = 0;  ///< of the fitted line over the rows
  int points = 0;
};

/// Parses one nccl-tests output. The collective comes from "# Collective test starting: NAME", or
/// else from the file name (all_reduce_perf..., alltoall_perf...). Throws ScenarioError naming the
/// file and line of what it cannot read.
NcclTestsRun parse_nccl_tests(const std::string& path, const std::string& text);

/// Fits latency and bus bandwidth. Throws ScenarioError when the rows cannot determine them.
NcclTestsFit fit_nccl_tests(const NcclTestsRun& run);

}  // namespace memtwin
