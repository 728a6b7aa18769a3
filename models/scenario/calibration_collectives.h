#pragma once
// The `collectives` section of a calibration file: collectives measured on the user's cluster,
// as `memtwin calibrate --nccl-tests` writes them from nccl-tests output.
//
//   collectives:
//     measured:
//       - {collective: all_reduce, ranks: 16, nodes: 2, latency: 41.2us, bus_bandwidth: 182GB/s,
//          source: all_reduce_perf.txt}
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "models/scenario.h"
#include "models/scenario/scenario_error.h"

namespace memtwin {

/// Reads the section; throws ScenarioError naming the file, line and key.
std::vector<MeasuredCollective> read_measured_collectives(const std::string& path, const YAML::Node& section);

}  // namespace memtwin
