#include "sim/fidelity_choice.h"

#include <algorithm>
#include <map>
#include <set>

namespace memtwin::sim {
namespace {

// Whether two nodes of each stage stand exactly for all of them: every data-parallel replica of a
// stage runs the same program, and every communicator, within each stage it touches, lies in one
// node or takes in all of the stage's nodes, so that the flows folded onto the kept nodes are the
// flows every node sees. A hybrid-sharding group over some of a stage's nodes is not (its fast
// step differs from the full one). Empty when they do; else the first communicator that does not.
std::string asymmetric_communicator(const Scenario& scenario, const Plan& plan, int per_stage) {
  const int gpus = scenario.cluster.gpus_per_node;
  for (const auto& [role, groups] : plan.groups) {
    for (const auto& group : groups) {
      std::map<int, std::set<int>> nodes_by_stage;
      for (int rank : group) nodes_by_stage[rank / gpus / per_stage].insert(rank / gpus);
      for (const auto& [stage, nodes] : nodes_by_stage) {
        const int n = static_cast<int>(nodes.size());
        if (n != 1 && n != per_stage) {
          return "a " + role + " communicator spans " + std::to_string(n) + " of a stage's " + std::to_string(per_stage) + " nodes";
        }
      }
    }
  }
  return "";
}

}  // namespace

NodeChoice simulated_nodes(const Scenario& scenario, const Plan& plan) {
  const Cluster& c = scenario.cluster;
  const int stages = scenario.training->parallelism.pipeline;
  NodeChoice choice;
  for (int n = 0; n < c.nodes; ++n) choice.nodes.push_back(n);
  const Fidelity asked = scenario.simulation.fidelity;
  if (asked == Fidelity::full) return choice;
  // Fast fidelity keeps two nodes of each stage (one could not carry inter-node traffic). Stages
  // must own whole nodes.
  const bool automatic = asked == Fidelity::automatic;
  if (c.inter_node.leaf_spine() && c.inter_node.oversubscription > 1 && c.nodes > c.inter_node.nodes_per_leaf) {
    // Which flows share a leaf's uplink to the spine depends on where every node sits: two nodes of
    // a stage cannot stand for the others.
    choice.reason = std::string(automatic ? "auto" : "fast") +
                    ": full, the nodes span several leaves of an oversubscribed leaf-spine fabric, which folding "
                    "nodes would not keep";
    return choice;
  }
  if (c.nodes % stages != 0) {
    if (automatic) choice.reason = "auto: full, the pipeline stages do not own whole nodes";
    return choice;
  }
  const int per_stage = c.nodes / stages;
  const int kept = std::min(per_stage, 2);
  if (kept == per_stage) {
    if (automatic) choice.reason = "auto: full, every stage has at most two nodes (fast would simulate them all too)";
    return choice;
  }
  if (automatic) {
    const std::string why_not = asymmetric_communicator(scenario, plan, per_stage);
    if (!why_not.empty()) {
      choice.reason = "auto: full, " + why_not + " (fast would fold it inexactly)";
      return choice;
    }
    choice.reason = "auto: fast, every communicator lies in one node or spans all of its stage's nodes, where two "
                    "nodes of each stage stand exactly for all of them";
  }
  choice.fidelity = Fidelity::fast;
  choice.nodes.clear();
  for (int stage = 0; stage < stages; ++stage) {
    for (int n = 0; n < kept; ++n) choice.nodes.push_back(stage * per_stage + n);
  }
  return choice;
}

// Counted before the engine exists (the Simulation builds its platform into it).
long actors_for(const Scenario& scenario, const Plan& plan, const std::vector<int>& nodes) {
  std::vector<std::size_t> streams_of_program;
  for (const auto& program : plan.programs) {
    std::set<Stream> streams;
    for (const auto& op : program.ops) streams.insert(op.stream);
    streams_of_program.push_back(streams.size());
  }
  long actors = 0;
  for (int node : nodes)
    for (int g = 0; g < scenario.cluster.gpus_per_node; ++g)
      actors += static_cast<long>(streams_of_program[plan.program_of_rank[node * scenario.cluster.gpus_per_node + g]]);
  return actors;
}

}  // namespace memtwin::sim
