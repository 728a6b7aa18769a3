#pragma once
// Executes a Plan on the SimGrid platform: one actor per (rank, stream) runs that stream's ops in
// order, each op waiting for its dependencies; compute takes its roofline time, collectives run
// as flows (sim/collectives.h), copies cross PCIe, and every alloc/free passes through a per-rank
// accounting of device memory that records the timeline, the peak and the first out-of-memory.
// One simulation per process: SimGrid's engine cannot be restarted (ARCHITECTURE.md §5).
//
// Fidelity `fast` simulates two nodes of each pipeline stage only (every data-parallel replica of a
// stage runs the same program, so the others repeat them): collectives keep the full group's sizes
// and step latencies, and a flow towards an unsimulated node goes to the simulated node of the same
// stage and ring position, so NVLink, NICs and uplinks carry the load they would in the full cluster.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "models/memory/out_of_memory.h"
#include "models/plan/plan.h"
#include "models/plan/step_trace.h"
#include "models/progress.h"
#include "models/scenario.h"

namespace memtwin::sim {


struct StepSimulation {
  double step_s = 0;
  double compute_busy_s = 0;  ///< rank 0: time its compute stream was busy
  double comm_busy_s = 0;     ///< rank 0: time its communication stream was busy
  std::map<std::string, double> comm_bytes_per_gpu;  ///< rank 0's sent bytes by collective
  std::int64_t peak_bytes = 0;                       ///< rank 0's peak of the timeline
  std::map<std::string, std::int64_t> breakdown_at_peak;  ///< bytes by category at that moment
  MemoryTimeline memory_timeline;                    ///< rank 0: (time, bytes in use)
  std::vector<StepTraceEvent> events;                    ///< ranks below `trace_ranks`
  std::optional<OutOfMemoryReport> oom;
  long flows = 0;
  long activities = 0;
  int simulated_ranks = 0;  ///< all ranks at full fidelity; two nodes per pipeline stage at fast fidelity
  Fidelity fidelity = Fidelity::full;  ///< what ran (never automatic)
  std::string fidelity_reason;         ///< why, when simulation.fidelity was auto
};

/// The ranks whose ops a step's trace holds, unless told otherwise.
inline constexpr int kTracedRanks = 8;

/// `progress` hears how many of the simulated ranks' plan ops have completed.
StepSimulation simulate_step(const Scenario& scenario, const Plan& plan, int trace_ranks = kTracedRanks,
                             Progress* progress = nullptr);

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

/// The category a plan tensor belongs to in the memory breakdown.
std::string tensor_category(const std::string& tensor);

}  // namespace memtwin::sim
