#pragma once
// Several training jobs on one shared cluster (`jobs:`): each job's plan on its share of one
// SimGrid platform, each alone and then all together, and the links they share.
#include <cstddef>
#include <string>
#include <vector>

#include "models/plan/plan.h"
#include "models/scenario.h"
#include "sim/step_simulation.h"

namespace memtwin::sim {

/// A training job on a shared cluster (`jobs:`): its scenario, its plan and the shared cluster's
/// GPU each of its ranks runs on.
struct PlacedJob {
  const Scenario* scenario = nullptr;
  const Plan* plan = nullptr;
  std::vector<int> gpus;
};

/// Each job's step alone and together, by job. Times are each step's own (from its first op to
/// its last); memory timelines and traces are not kept meaningful across phases.
struct JobSteps {
  std::vector<StepSimulation> alone, together;
  /// A link direction that more than one job used alone: which jobs, and what it carried while
  /// they ran together (bytes, and their mean rate over its bandwidth for the together phase).
  struct SharedLink {
    std::string link, direction;
    std::vector<std::size_t> jobs;
    double bytes = 0, utilization = 0;
  };
  std::vector<SharedLink> shared_links;
};

/// The jobs of `deployment` (a `jobs:` scenario) on one platform built of its cluster, every rank
/// simulated: each job alone, one after another, then all of them from one instant, so that the
/// difference is the sharing of links. Refused (ScenarioError) past this machine's actors, memory
/// or the scenario's time limit, as a single step is.
JobSteps simulate_jobs(const Scenario& deployment, const std::vector<PlacedJob>& jobs);

}  // namespace memtwin::sim
