#include "models/analytic/communication_time.h"

#include <set>

#include "models/comm/collective_model.h"

namespace memtwin {

CommunicationTime communication_time(const Scenario& s, const Plan& plan) {
  const CollectiveModel model(s.cluster);
  const int per_node = s.cluster.gpus_per_node;
  CommunicationTime best;
  best.seconds["total"] = -1;
  std::set<int> done;  // one rank per program: data-parallel peers run the same ops
  for (int rank = 0; rank < plan.ranks(); ++rank) {
    if (!done.insert(plan.program_of_rank[rank]).second) continue;
    CommunicationTime here;
    here.rank = rank;
    std::map<std::string, double> largest;
    for (const Op& op : plan.programs[plan.program_of_rank[rank]].ops) {
      if (op.kind != OpKind::collective) continue;
      const auto role = plan.group_of_rank[rank].find(op.role);
      if (role == plan.group_of_rank[rank].end()) continue;
      const auto& group = plan.groups.at(op.role)[role->second];
      std::set<int> nodes;
      for (int r : group) nodes.insert(r / per_node);
      const bool p2p = op.collective == Collective::p2p_forward || op.collective == Collective::p2p_backward;
      if (p2p && (op.collective == Collective::p2p_forward) != (group.front() == rank)) continue;  // the receiving end
      const CollectiveCost cost =
          model.cost(op.collective, {static_cast<int>(group.size()), static_cast<int>(nodes.size())}, op.bytes_total);
      const std::string kind = p2p ? "p2p" : collective_name(op.collective);
      here.seconds[kind] += cost.time().value();
      here.seconds["total"] += cost.time().value();
      here.calls[kind] += 1;
      if (op.bytes_total > largest[kind]) {
        largest[kind] = op.bytes_total;
        here.basis[kind] = cost.basis;
      }
    }
    if (here.seconds["total"] > best.seconds["total"]) best = here;
  }
  if (best.seconds["total"] < 0) best.seconds["total"] = 0;
  return best;
}

}  // namespace memtwin
