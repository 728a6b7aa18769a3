#pragma once
// Collectives as SimGrid flows, O(n) per collective so that large groups stay cheap while shared
// links still contend. The collective model (models/comm/collective_model.h) decides the time: the
// algorithm and protocol NCCL would pick, its latency and its bandwidth. The flows carry the bytes a
// ring moves over each link (scaled by the algorithm's traffic factor), scaled up where the model's
// transfer is slower than the links (protocol overheads, channel caps), so on idle links the
// collective takes exactly the model's time and on shared links it slows as SimGrid shares them. A group inside one node is a
// ring over NVLink (or PCIe); a group across nodes runs NCCL's rail-aligned rings: each GPU sends
// its share of the inter-node traffic to the same-rail GPU of the next node through its own NIC,
// the rest over NVLink to its neighbour. An all-to-all (expert parallelism) is every member sending
// each other member its share at once, n(n-1) uncapped flows.
#include <span>
#include <vector>

#include "models/plan/plan.h"
#include "sim/platform.h"

namespace memtwin::sim {

struct Flow {
  int src = 0, dst = 0;  ///< global ranks
  double bytes = 0;      ///< what crosses the links (see plan_collective)
};

struct CollectivePlan {
  std::vector<Flow> flows;
  double latency_s = 0;       ///< the model's latency beyond what the flows' routes already charge
  double bytes_per_rank = 0;  ///< what each rank sends (for communication.bytes_per_gpu)
};

/// The flows of `calls` identical collectives over `ranks` (in ring order), each moving a buffer of
/// `bytes_total`: the model prices one call, the flows carry all of them back to back.
CollectivePlan plan_collective(Collective kind, const std::vector<int>& ranks, double bytes_total,
                               const std::vector<int>& node_of_gpu, const Cluster& cluster, int calls = 1);

/// Runs the flows and waits for all of them, then the remaining latency. Call from an actor.
void run_collective(const CollectivePlan& plan, const Platform& platform);
/// Several collectives at once (on their own or on shared links): every plan's flows together,
/// then the longest remaining latency.
void run_collectives(std::span<const CollectivePlan> plans, const Platform& platform);

}  // namespace memtwin::sim
