#pragma once
// Serving on SimGrid: a router actor releases requests at their arrival times to replica actors;
// each replica runs the shared continuous-batching scheduler (models/serving/batch_scheduler.h) on
// its GPUs of the cluster's platform (sim/platform.h): KV swaps and tier fetches cross each GPU's
// PCIe link (NVMe reads first) before the iteration, the iteration sleeps its kernels' roofline
// time (models/serving/iteration_cost.h), tensor parallelism's all-reduces run as ring flows over
// the replica's GPUs, and NVMe demotions and proactive offloads run in the background, contending
// with later transfers. Requests are data inside the actors, not actors.
#include <cstddef>
#include <memory>
#include <vector>

#include <simgrid/s4u.hpp>

#include "models/progress.h"
#include "models/scenario.h"
#include "models/serving/request_stream.h"
#include "models/serving/serving_run.h"
#include "sim/platform.h"

namespace memtwin::sim {

/// A colocated serving run (not disaggregated) as SimGrid actors on a platform given to it: what
/// simulate_serving and simulate_jobs (job_simulation.h) share. The engine must exist; `platform`
/// holds the deployment's GPUs by slot (a platform of its own, or a job's share of a shared one)
/// and outlives the session, as does `scenario`. Replica r takes GPU slots r x (tensor x pipeline)
/// onwards. `requests` are the scenario's (generate_requests).
class ServingSession {
 public:
  ServingSession(const Scenario& scenario, const std::vector<Request>& requests, const Platform& platform,
                 Progress* progress = nullptr);
  ~ServingSession();
  ServingSession(const ServingSession&) = delete;
  ServingSession& operator=(const ServingSession&) = delete;
  /// Starts the router and the replicas now; the run's requests arrive counting from here. The
  /// actors end when every request has ended and the background copies have drained.
  std::vector<simgrid::s4u::ActorPtr> start();
  /// After its actors ended: the run, its times counted from its start.
  ServingRun finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

ServingRun simulate_serving(const Scenario& scenario, Progress* progress = nullptr);

}  // namespace memtwin::sim
