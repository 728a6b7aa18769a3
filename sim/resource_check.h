#pragma once
// The resource pre-check: before SimGrid starts, the work a simulation will do is estimated from
// what it is given (the plan's ops on the simulated ranks, the flows its collectives build and of
// them those SimGrid runs; the requests' decode steps), turned into wall time and memory with
// per-unit costs measured on the reference machine (docs/reliability.md), and a run past
// `simulation.time_limit` or past the memory this machine has free is refused with the estimate
// and what to change, instead of running for hours or being killed. A long run that is allowed
// says its estimate up front.
#include <functional>
#include <string>
#include <vector>

#include "models/plan/plan.h"
#include "models/scenario.h"
#include "models/serving/request_stream.h"

namespace memtwin::sim {

struct WorkEstimate {
  double units = 0;    ///< op executions plus collective members laid out; decode steps plus requests
  double seconds = 0;  ///< on the reference machine
  double bytes = 0;    ///< peak resident memory of the simulator
  double actors = 0;   ///< SimGrid actors, each with a stack mapped whole (committed as used)
  std::string what;    ///< "a training step of 8 ranks, 1.2e6 ops", for messages
};

/// Of a collective's flows (by kind, communicator role and bytes), the share SimGrid runs: less
/// than 1 where some flows stand for the others (sim/lone_collectives.h).
using TransferShare = std::function<double(Collective, const std::string& role, double bytes)>;

/// A training step on `cluster` whose `simulated_ranks` run their programs of `plan` on `actors`
/// actors, the first `trace_ranks` of them recording trace events; `share` says how many of the
/// collectives' flows start SimGrid transfers (every one, unless given).
WorkEstimate estimate_step(const Plan& plan, const Cluster& cluster, const std::vector<int>& simulated_ranks, int trace_ranks,
                           long actors, const TransferShare& share = {});

/// A serving run of these requests on the scenario's deployment. Its memory is mostly the requests
/// (as generated, and their records) and the gaps between output tokens, kept as about one run of
/// equal values per iteration of each replica; its time, work per token and per iteration. The
/// iterations are estimated before it runs: the output tokens in batches of a replica's steady
/// batch, plus one per prompt, and at most one per output token and prompt. With requests that
/// arrive over time the steady batch is the one with which a replica keeps up with its share of
/// the arrivals, its iterations timed by the IterationModel (one sequence's decode step, each
/// further sequence's cache read, the prompts' prefill); with closed-loop clients, each replica's
/// share of the clients; never more than max_num_seqs. The estimate's `what` names them.
WorkEstimate estimate_serving(const Scenario& scenario, const std::vector<Request>& requests);

/// Throws ScenarioError (exit 2: the scenario file and the key to change) when `estimate` exceeds the scenario's time limit, the memory this
/// machine has available, or (with the actors' stacks) the address space this process may map
/// (RLIMIT_AS, `ulimit -v`), naming them and the ways out; writes the estimate to stderr when the
/// run is expected to take more than 10 s. refuse_beyond_machine checks both; a caller that knows
/// the time better once the simulation is set up checks the memory first and the time then.
void refuse_beyond_machine(const Scenario& scenario, const WorkEstimate& estimate);
void refuse_beyond_memory(const Scenario& scenario, const WorkEstimate& estimate);
void refuse_beyond_time(const Scenario& scenario, const WorkEstimate& estimate);

/// Memory this process may still use: MemAvailable, or RLIMIT_AS when that is lower.
double available_memory_bytes();

}  // namespace memtwin::sim
