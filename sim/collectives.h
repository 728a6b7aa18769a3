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
#include <cstdint>
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

/// The node of each of a cluster's `ranks` global ranks (ranks fill nodes in order, gpus_per_node
/// each): what plan_collective takes as `node_of_gpu` for the whole cluster.
std::vector<int> node_of_each_rank(int ranks, const Cluster& cluster);

/// The flows of `calls` identical collectives over `ranks` (in ring order), each moving a buffer of
/// `bytes_total`: the model prices one call, the flows carry all of them back to back.
CollectivePlan plan_collective(Collective kind, const std::vector<int>& ranks, double bytes_total,
                               const std::vector<int>& node_of_gpu, const Cluster& cluster, int calls = 1);

/// Runs the flows and waits for all of them, then the remaining latency. Call from an actor.
void run_collective(const CollectivePlan& plan, const Platform& platform);
/// Several collectives at once (on their own or on shared links): every plan's flows together,
/// then the longest remaining latency.
void run_collectives(std::span<const CollectivePlan> plans, const Platform& platform);

/// A plan's flows by the member that sends or receives them, for collectives whose members each run
/// an actor: each member's actor then moves its own flows through mailboxes. Why: SimGrid 3.32 keeps
/// every host-to-host transfer (`Comm::sendto`) on one global list and scans all of it each time
/// one finishes, so one actor issuing a large group's flows costs O(flows^2); an actor's own
/// transfers stay on its own short list. The flows start at the same instant either way (every
/// member posts when the collective starts), so the collective takes the same time.
class MemberFlows {
 public:
  /// Empty (`usable()` false) for a plan of few flows (see kFewestFlows), or unless every flow with
  /// bytes runs between two of `member_slots`.
  MemberFlows(const CollectivePlan& plan, const std::vector<int>& member_slots);
  bool usable() const { return usable_; }
  /// The member's transfers, created but not started: a send of each of its flows and a receive of
  /// each flow sent to it, appended to `transfers`. Call from the actor of `slot` (SimGrid makes
  /// the calling actor their owner); `inbox[s]` is the mailbox of slot s's actor that runs this
  /// collective (all members' actors run it on the same stream). Once every member's are made,
  /// start them all (in one simcall, sim/one_simcall.h), and each member waits for its own.
  void make_transfers(int slot, const std::vector<simgrid::s4u::Mailbox*>& inbox,
                      std::vector<simgrid::s4u::CommPtr>& transfers) const;

 private:
  struct Send {
    int dst = 0;
    std::uint64_t bytes = 0;
  };
  bool usable_ = false;
  std::vector<std::vector<Send>> sends_;  ///< by slot
  std::vector<int> receives_;             ///< by slot: how many flows arrive
};

}  // namespace memtwin::sim
