#pragma once
// Disaggregated serving on SimGrid (inference.disaggregation): the router releases requests to the
// prefill instances; when a prompt's prefill completes there, its KV cache (the compressor's bytes
// for the prompt, so compressed where configured) crosses from the prefill instance's GPUs to a
// decode instance's as flows on the cluster's links (NVLink inside a node, NICs and fabric between
// nodes), contending with everything else on them; the first token reaches the client when the
// transfer ends (TTFT includes it), and the decode instance decodes the rest. Each instance runs
// the colocated engine's replica actor (sim/serving_replicas.h) under its instance scenario
// (models/serving/disaggregation.h).
#include <memory>
#include <vector>

#include <simgrid/s4u.hpp>

#include "models/link_load.h"
#include "models/progress.h"
#include "models/scenario.h"
#include "models/serving/request_stream.h"
#include "models/serving/serving_run.h"
#include "sim/platform.h"

namespace memtwin::sim {

struct DisaggregatedRun {
  ServingRun run;          ///< every request, the decode instances' KV timeline and capacity
  ServingRun prefill_run;  ///< the prefill instances' own counters (iterations, peak blocks, op times)
  LinkLoad link_load;      ///< what every link direction carried, interval by interval (KV transfers, TP collectives)
};

/// A disaggregated deployment's actors on a platform given to it (its own, or a job's share of a
/// shared one): what simulate_disaggregated_serving and simulate_jobs (job_simulation.h) share. The
/// engine must exist; `platform` holds the deployment's GPUs by slot, prefill instances first as
/// models/serving/disaggregation.h places them, and outlives the session, as does `deployment`.
/// `requests` are the deployment's (generate_requests). It meters no links (its caller may).
class DisaggregatedSession {
 public:
  DisaggregatedSession(const Scenario& deployment, const std::vector<Request>& requests, const Platform& platform,
                       Progress* progress = nullptr);
  ~DisaggregatedSession();
  DisaggregatedSession(const DisaggregatedSession&) = delete;
  DisaggregatedSession& operator=(const DisaggregatedSession&) = delete;
  /// Starts the router and every instance now; the requests arrive counting from here. The actors
  /// end when every request has ended (its KV transfers' actors end before that).
  std::vector<simgrid::s4u::ActorPtr> start();
  /// After its actors ended: both sides' runs, their times counted from its start (link_load empty).
  DisaggregatedRun finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

DisaggregatedRun simulate_disaggregated_serving(const Scenario& deployment, Progress* progress = nullptr);

}  // namespace memtwin::sim
