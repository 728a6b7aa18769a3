#include "sim/collectives.h"

#include <map>

namespace memtwin::sim {

namespace sg4 = simgrid::s4u;

namespace {
int steps(Collective kind, int n) { return kind == Collective::all_reduce ? 2 * (n - 1) : n - 1; }
}  // namespace

CollectivePlan plan_collective(Collective kind, const std::vector<int>& ranks, double bytes_total,
                               const std::vector<int>& node_of_gpu, const Cluster& cluster) {
  CollectivePlan out;
  const int n = static_cast<int>(ranks.size());
  if (n < 2) return out;
  if (kind == Collective::p2p_forward || kind == Collective::p2p_backward) {
    const bool forward = kind == Collective::p2p_forward;
    out.flows.push_back({forward ? ranks[0] : ranks[1], forward ? ranks[1] : ranks[0], bytes_total});
    out.bytes_per_rank = bytes_total;
    return out;
  }
  if (kind == Collective::all_to_all) {
    // Every member sends its buffer's n-1 foreign shares at once (NCCL's grouped send/recv): O(n^2)
    // flows, for the small groups expert parallelism uses.
    const double share = bytes_total / n;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        if (i != j) out.flows.push_back({ranks[i], ranks[j], share});
    out.bytes_per_rank = share * (n - 1);
    return out;
  }
  const double factor = kind == Collective::all_reduce ? 2.0 : 1.0;
  const double per_rank = factor * bytes_total * (n - 1) / n;
  out.bytes_per_rank = per_rank;

  // Ranks by node, in ring order.
  std::map<int, std::vector<int>> by_node;
  for (int r : ranks) by_node[node_of_gpu[r]].push_back(r);
  const int nodes = static_cast<int>(by_node.size());
  if (nodes == 1) {
    for (int i = 0; i < n; ++i) out.flows.push_back({ranks[i], ranks[(i + 1) % n], per_rank});
    // A ring all-gather or reduce-scatter takes n-1 steps, an all-reduce 2(n-1); SimGrid already
    // charges one hop latency on each flow.
    out.latency_s = (steps(kind, n) - 1) * cluster.intra_node.latency.value();
    return out;
  }
  // Rail-aligned rings across nodes: every node holds the same number of the group's ranks
  // (the plan's groups are regular), local index j of node a talks to local index j of node a+1.
  std::vector<std::vector<int>> node_ranks;
  for (auto& [node, rs] : by_node) node_ranks.push_back(rs);
  const int local = static_cast<int>(node_ranks.front().size());
  const double inter = factor * bytes_total * (nodes - 1) / (static_cast<double>(nodes) * local);
  const double intra = per_rank - inter;
  for (int a = 0; a < nodes; ++a) {
    const auto& here = node_ranks[a];
    const auto& next = node_ranks[(a + 1) % nodes];
    for (int j = 0; j < local && j < static_cast<int>(next.size()); ++j) {
      out.flows.push_back({here[j], next[j], inter});
      if (local > 1 && intra > 0) out.flows.push_back({here[j], here[(j + 1) % local], intra});
    }
  }
  const double factor_steps = kind == Collective::all_reduce ? 2.0 : 1.0;
  out.latency_s = factor_steps * ((nodes - 1) * cluster.inter_node.latency.value() +
                                  (local - 1) * cluster.intra_node.latency.value()) -
                  cluster.inter_node.latency.value();
  return out;
}

void run_collective(const CollectivePlan& plan, const Platform& platform) {
  std::vector<sg4::CommPtr> comms;
  comms.reserve(plan.flows.size());
  for (const auto& f : plan.flows) {
    if (f.bytes <= 0) continue;
    comms.push_back(sg4::Comm::sendto_async(platform.gpus[f.src], platform.gpus[f.dst], static_cast<uint64_t>(f.bytes)));
  }
  for (auto& c : comms) c->wait();
  if (plan.latency_s > 0) sg4::this_actor::sleep_for(plan.latency_s);
}

}  // namespace memtwin::sim
