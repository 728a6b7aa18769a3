#pragma once
// Which nodes a training-step simulation runs (simulation.fidelity): every node (full), two nodes
// of each pipeline stage standing for all of them (fast), or, for auto, fast where that is exact.
// And how many SimGrid actors a simulation of those nodes starts, to check before starting them.
#include <string>
#include <vector>

#include "models/plan/plan.h"
#include "models/scenario.h"

namespace memtwin::sim {

struct NodeChoice {
  std::vector<int> nodes;              ///< the nodes simulated, in order
  Fidelity fidelity = Fidelity::full;  ///< what runs (never automatic)
  std::string reason;                  ///< why, when simulation.fidelity is auto
};

NodeChoice simulated_nodes(const Scenario& scenario, const Plan& plan);

/// The SimGrid actors a simulation of these nodes starts: one per (rank, stream).
long actors_for(const Scenario& scenario, const Plan& plan, const std::vector<int>& nodes);

}  // namespace memtwin::sim
