#pragma once
// Collectives as SimGrid flows, O(n) per collective so that large groups stay cheap while shared
// links still contend. A group inside one node runs a ring: rank i sends to rank i+1 what the
// ring moves over that hop, (n-1)/n of the buffer for all-gather and reduce-scatter, twice that
// for all-reduce. A group across nodes runs NCCL's rail-aligned rings: each GPU sends its share of
// the inter-node traffic to the same-rail GPU of the next node through its own NIC, and the rest
// over NVLink to its neighbour inside the node. Each ring step costs the hop latency (alpha): on
// idle links a ring all-reduce of B bytes takes 2(n-1) alpha + 2 (n-1)/n B / bandwidth, the
// alpha-beta closed form of nccl-tests' PERFORMANCE.md. An all-to-all (expert parallelism) is
// every member sending each other member its share at once, n(n-1) flows.
#include <vector>

#include "models/plan/plan.h"
#include "sim/platform.h"

namespace memtwin::sim {

struct Flow {
  int src = 0, dst = 0;  ///< global ranks
  double bytes = 0;
};

struct CollectivePlan {
  std::vector<Flow> flows;
  double latency_s = 0;       ///< the ring's step latencies
  double bytes_per_rank = 0;  ///< what each rank sends (for communication.bytes_per_gpu)
};

/// The flows of one collective over `ranks` (in ring order) moving a buffer of `bytes_total`.
CollectivePlan plan_collective(Collective kind, const std::vector<int>& ranks, double bytes_total,
                               const std::vector<int>& node_of_gpu, const Cluster& cluster);

/// Runs the flows and waits for all of them, then the ring latency. Call from an actor.
void run_collective(const CollectivePlan& plan, const Platform& platform);

}  // namespace memtwin::sim
