#pragma once
// NCCL's tuning model (src/graph/tuning.cc of NVIDIA/nccl at 5067397c, "ncclTopoTuneModel" and
// "ncclTopoGetAlgoTime"), restated for the collective model. Internal to models/comm/.
// NCCL's own units inside: microseconds and GB/s (1e9 B/s).
#include <vector>

#include "models/enums.h"
#include "models/plan/plan.h"

namespace memtwin::nccl {

/// What NCCL's topology search would hand the tuner: the channels and their bandwidths.
struct Graph {
  int channels = 16;
  double intra_gbps = 0;     ///< usable intra-node bandwidth per GPU (all channels), GB/s
  double inter_gbps = 0;     ///< usable inter-node bandwidth of the group per node (all channels), GB/s
  bool nvlink = true;        ///< intra-node links are NVLink (else PCIe)
  bool nvswitch = true;      ///< through an NVSwitch (NVLS possible on Hopper and later)
  GpuGeneration generation = GpuGeneration::hopper;
  double net_overhead_us = 1.0;
};

struct Choice {
  CollectiveAlgorithm algorithm;
  CollectiveProtocol protocol;
  double latency_us = 0;
  double bandwidth_gbps = 0;  ///< NCCL's stored bandwidth: nBytes / this = the transfer time
};

/// Every (algorithm, protocol) NCCL would consider for this collective and group, with its
/// latency and bandwidth; those `allowed` lists exclude are left out. all_reduce, all_gather and
/// reduce_scatter only.
std::vector<Choice> choices(Collective kind, int ranks, int nodes, const Graph& graph,
                            const std::vector<CollectiveAlgorithm>& allowed_algorithms,
                            const std::vector<CollectiveProtocol>& allowed_protocols);

/// NCCL's time for one call of `bytes` with `choice`, microseconds (its size corrections included).
double time_us(const Choice& choice, Collective kind, int ranks, int nodes, const Graph& graph, double bytes);

}  // namespace memtwin::nccl
