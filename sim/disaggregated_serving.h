#pragma once
// Disaggregated serving on SimGrid (inference.disaggregation): the router releases requests to the
// prefill instances; when a prompt's prefill completes there, its KV cache (the compressor's bytes
// for the prompt, so compressed where configured) crosses from the prefill instance's GPUs to a
// decode instance's as flows on the cluster's links (NVLink inside a node, NICs and fabric between
// nodes), contending with everything else on them; the first token reaches the client when the
// transfer ends (TTFT includes it), and the decode instance decodes the rest. Each instance runs
// the colocated engine's replica actor (sim/serving_replicas.h) under its instance scenario
// (models/serving/disaggregation.h).
#include "models/link_load.h"
#include "models/progress.h"
#include "models/scenario.h"
#include "models/serving/serving_run.h"

namespace memtwin::sim {

struct DisaggregatedRun {
  ServingRun run;          ///< every request, the decode instances' KV timeline and capacity
  ServingRun prefill_run;  ///< the prefill instances' own counters (iterations, peak blocks, op times)
  LinkLoad link_load;      ///< what every link direction carried, interval by interval (KV transfers, TP collectives)
};

DisaggregatedRun simulate_disaggregated_serving(const Scenario& deployment, Progress* progress = nullptr);

}  // namespace memtwin::sim
