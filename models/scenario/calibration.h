#pragma once
// A calibration file (`cluster.calibration: FILE`, written from measurements by
// scripts/gpu/calibration_from_probe.py and later `memtwin calibrate`) replaces the cluster's
// default efficiencies and runtime overheads. Values the scenario itself gives still win.
//
//   efficiency: {gemm: 0.818, attention: 0.6, memory: 0.891}
//   runtime: {cuda_context: 595MiB, nccl_buffers: 578MiB, framework_overhead: ..., cuda_graph_pool: ...}
//   host: {pcie_bandwidth: 55.3GB/s}
//   device: free text
#include <string>

#include "models/scenario.h"
#include "models/scenario/param_values.h"

namespace memtwin {

/// Applies the file to `cluster`. Throws ScenarioError naming the calibration file, line and key.
void apply_calibration(const std::string& path, const ParamValues& scenario, Cluster& cluster);

}  // namespace memtwin
