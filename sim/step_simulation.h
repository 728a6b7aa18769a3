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
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/memory/out_of_memory.h"
#include "models/plan/plan.h"
#include "models/plan/step_trace.h"
#include "models/progress.h"
#include "models/scenario.h"
#include "sim/platform.h"

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

/// One plan's ranks run by SimGrid actors on a platform given to it: what simulate_step and
/// simulate_jobs (job_simulation.h) share. The engine must exist; `platform` holds the simulated
/// nodes' GPUs by slot (a platform of their own, or a job's share of a shared one).
class PlanRun {
 public:
  virtual ~PlanRun() = default;
  /// Starts every stream's actor now; the step is timed from here.
  virtual std::vector<simgrid::s4u::ActorPtr> start_actors() = 0;
  /// After the engine ran: the step (std::logic_error if an op never finished: a deadlock).
  virtual StepSimulation result() = 0;
};
std::unique_ptr<PlanRun> make_plan_run(const Scenario& scenario, const Plan& plan, int trace_ranks,
                                       const std::vector<int>& simulated_nodes, Platform platform);

/// The category a plan tensor belongs to in the memory breakdown.
std::string tensor_category(const std::string& tensor);

}  // namespace memtwin::sim
