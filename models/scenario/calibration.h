#pragma once
// A calibration file (`cluster.calibration: FILE`, written from measurements by `memtwin calibrate`
// or scripts/gpu/calibration_from_probe.py) replaces the cluster's default efficiencies, runtime
// overheads and, where it measured them, the catalog's device figures. Values the scenario itself
// gives still win.
//
//   efficiency: {gemm: 0.818, attention: 0.6, memory: 0.891}
//   runtime: {cuda_context: 595MiB, nccl_buffers: 578MiB, framework_overhead: ..., cuda_graph_pool: ...,
//             allocator_waste: 0.05}
//   host: {pcie_bandwidth: 55.3GB/s, cpu_adam_params_per_s: 2.0e8}
//   gpu: {flops: {fp32: 61.2GFLOPS}, hbm_bandwidth: 9.8GB/s}
//   intra_node: {bandwidth: 3.2GB/s, latency: 12us}
//   collectives: {measured: [{collective: all_reduce, ranks: 16, nodes: 2, latency: 41us,
//                             bus_bandwidth: 182GB/s}]}   (memtwin calibrate --nccl-tests)
//   device: free text
#include <string>

#include <yaml-cpp/yaml.h>

#include "models/scenario.h"
#include "models/scenario/param_values.h"

namespace memtwin {

/// Throws ScenarioError naming the second occurrence of a key repeated in `map` (`prefix` names
/// the map in the message).
void refuse_duplicate_keys(const std::string& path, const YAML::Node& map, const std::string& prefix);

/// Applies the file to `cluster`. Throws ScenarioError naming the calibration file, line and key.
void apply_calibration(const std::string& path, const ParamValues& scenario, Cluster& cluster);

}  // namespace memtwin
