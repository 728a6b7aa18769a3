#pragma once
// Several jobs on one shared cluster (`jobs:`), training and serving: each job's plan on its share
// of one SimGrid platform, each alone and then all together, and the links they share.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "models/link_load.h"
#include "models/plan/plan.h"
#include "models/scenario.h"
#include "models/serving/serving_run.h"
#include "sim/step_simulation.h"

namespace memtwin::sim {

/// A job on a shared cluster (`jobs:`): its scenario, its plan (a training job's; none for a
/// serving job, whose scenario says what it serves) and the shared cluster's GPU each of its ranks
/// runs on.
struct PlacedJob {
  const Scenario* scenario = nullptr;
  const Plan* plan = nullptr;
  std::vector<int> gpus;
};

/// What each job did alone and together. Times are each step's or run's own (a step from its
/// first op to its last, a serving run from its start); memory timelines and traces are not kept
/// meaningful across phases.
struct JobOutcome {
  /// A training job: its step alone, and its step together. Beside serving jobs it runs step after
  /// step until they have served every request: `together` is then the first of them with
  /// `step_s` and `comm_busy_s` the mean over all `steps_together` (an out-of-memory any one's).
  StepSimulation alone, together;
  int steps_together = 0;
  /// A serving job: its run alone and together (a disaggregated one's decode side, which holds every
  /// request), and a disaggregated one's prefill instances' kinds of work (together).
  std::optional<ServingRun> served_alone, served_together;
  IterationOpKinds prefill_op_kinds = 0;
};

struct JobSteps {
  std::vector<JobOutcome> jobs;  ///< by job
  /// A link direction that more than one job used alone: which jobs, and what it carried while
  /// they ran together (bytes, and their mean rate over its bandwidth for the together phase).
  struct SharedLink {
    std::string link, direction;
    std::vector<std::size_t> jobs;
    double bytes = 0, utilization = 0;
  };
  std::vector<SharedLink> shared_links;
  /// Every link direction's bytes over the together phase, interval by interval (its times from
  /// the phase's start).
  LinkLoad together_load;
};

/// The jobs of `deployment` (a `jobs:` scenario) on one platform built of its cluster, every rank
/// simulated: each job alone, one after another, then all of them from one instant, so that the
/// difference is the sharing of links. Refused (ScenarioError) past this machine's actors, memory
/// or the scenario's time limit, as a single step is; the training steps beside serving jobs are
/// estimated, and checked, once the serving jobs' runs alone show how long they serve.
JobSteps simulate_jobs(const Scenario& deployment, const std::vector<PlacedJob>& jobs);

}  // namespace memtwin::sim
