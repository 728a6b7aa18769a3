#include "sim/resource_check.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <tuple>

#include "models/scenario/scenario_error.h"
#include "models/serving/disaggregation.h"
#include "models/serving/iteration_cost.h"
#include "models/serving/serving_run.h"
#include "models/unit_parse.h"
#include "sim/collectives.h"

namespace memtwin::sim {
namespace {

// Per-unit costs on the reference machine (2-core AMD EPYC, Debian 12, SimGrid 3.32), fitted to
// the runs in docs/reliability.md; an estimate, stated as one. A training step costs per op
// execution (and per member of a collective laid out), per op of a traced rank (its own SimGrid
// activity and trace event, where untraced ranks run consecutive compute as one) and per SimGrid
// transfer its collectives start, and each costs more the more ranks are simulated: every rank's
// actors switch in turn, and past a few thousand ranks their stacks and state no longer stay in
// the caches (1 + (ranks / kRanksDoublingStepCost)^2).
constexpr double kStepSecondsPerUnit = 3.3e-7;
constexpr double kStepSecondsPerTracedOp = 1.6e-7;
constexpr double kStepSecondsPerTransfer = 5.3e-6;
constexpr double kRanksDoublingStepCost = 3200;  // simulated ranks at which each unit costs twice
constexpr double kStepBytesPerUnit = 10;
// A traced op: its event (about 80 bytes) and, with --out, its line of trace.json (about 140),
// which is written event by event (models/plan/trace_document.h). Fitted on a 3,200-layer quick
// start with --out (docs/reliability.md, 2026-12-05); an upper bound without it.
constexpr double kTraceBytesPerEvent = 250;
// Per rank of the whole cluster, simulated or not: its group memberships and node, and the
// step's per-rank tables (an 800,000-GPU plan held 0.45 GiB).
constexpr double kStepBytesPerRank = 600;
// A serving run's time: the scheduler's work per request and output token, and SimGrid's per
// iteration of each replica (its sleep and the iteration's bookkeeping), which dominates when few
// sequences share an iteration. Refitted 2026-12-07 with the iterations' estimate
// (docs/reliability.md; it was 3.6e-8 s per request and output token alone).
constexpr double kServingSecondsPerUnit = 1.1e-8;
constexpr double kServingSecondsPerIteration = 6.7e-7;
// A serving run holds each request twice (as generated, and its record in the results: each
// record once more per side with disaggregation) and the gaps between output tokens as runs of
// equal values, about one per iteration of each replica (a batch's sequences share the
// iteration's gap): 8 bytes in a vector that grows by doubling, and two 8-byte keys in the
// percentiles' sort. Fitted on a run of long, lone requests (one run per iteration:
// docs/reliability.md, 2026-12-07); everything else a run keeps is bounded (the KV timeline,
// ServingRun::kMaxKvSamples; the trace's iterations, kMaxLoggedIterations).
constexpr double kServingBytesPerGapRun = 32;
constexpr double kBaseBytes = 64.0 * (1 << 20);
constexpr double kAnnounceSeconds = 10;
// SimGrid's default contexts/stack-size (8 MiB) and its guard page: mapped whole per actor.
constexpr double kActorStackBytes = 8.0 * (1 << 20) + 4096;

// RLIMIT_AS, or infinity when unlimited.
double address_space_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) return static_cast<double>(limit.rlim_cur);
  return 1e300;
}

std::string scientific(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2g", x);
  return text;
}

std::string duration_text(double seconds) {
  char text[32];
  if (seconds < 10) {
    std::snprintf(text, sizeof text, "%.2g s", seconds);
  } else if (seconds < 120) {
    std::snprintf(text, sizeof text, "%.0f s", seconds);
  } else if (seconds < 7200) {
    std::snprintf(text, sizeof text, "%.0f min", seconds / 60);
  } else {
    std::snprintf(text, sizeof text, "%.1f h", seconds / 3600);
  }
  return text;
}

}  // namespace

WorkEstimate estimate_step(const Plan& plan, const Cluster& cluster, const std::vector<int>& simulated_ranks, int trace_ranks,
                           long actors, const TransferShare& share) {
  // Every simulated rank executes each op of its program; a collective's flows are laid out once
  // per kind, role and size (one flow per member of its group) and reused, so each distinct one
  // costs its group's size or, when several groups lie among the simulated ranks, their members
  // together; and each simulated member starts its share of the collective's flows
  // (sim/collectives.h decides them; the role's first group stands for all of its groups). Memory
  // is the plan itself and the trace events of the traced ranks.
  std::map<int, double> ranks_of_program;
  for (int r : simulated_ranks) ranks_of_program[plan.program_of_rank[r]] += 1;
  const std::vector<int> node_of_gpu = node_of_each_rank(plan.ranks(), cluster);
  // By distinct collective: its flows per member, and of them those SimGrid runs.
  std::map<std::tuple<Collective, std::string, double>, std::pair<double, double>> flows_per_member;
  double units = 0, flows = 0, transfers = 0, executed = 0, plan_ops = 0, traced = 0;
  for (const Program& program : plan.programs) plan_ops += static_cast<double>(program.ops.size());
  for (const auto& [program, ranks] : ranks_of_program) {
    for (const Op& op : plan.programs[program].ops) {
      units += ranks;
      executed += ranks;
      if (op.kind != OpKind::collective) continue;
      const auto groups = plan.groups.find(op.role);
      if (groups == plan.groups.end() || groups->second.empty()) continue;
      const std::vector<int>& group = groups->second.front();
      auto [distinct, first_seen] = flows_per_member.try_emplace({op.collective, op.role, op.bytes_total}, 0.0, 0.0);
      auto& [per_member, run_per_member] = distinct->second;
      if (first_seen) {
        units += std::max(static_cast<double>(group.size()), ranks);
        if (group.size() >= 2) {
          per_member = static_cast<double>(plan_collective(op.collective, group, op.bytes_total, node_of_gpu, cluster).flows.size()) /
                       static_cast<double>(group.size());
          run_per_member = per_member * (share ? share(op.collective, op.role, op.bytes_total) : 1.0);
        }
      }
      flows += ranks * per_member;
      transfers += ranks * run_per_member;
    }
  }
  for (int r : simulated_ranks) {
    if (r >= trace_ranks) continue;
    for (const Op& op : plan.programs[plan.program_of_rank[r]].ops)
      if (op.kind != OpKind::alloc && op.kind != OpKind::free) traced += 1;
  }
  WorkEstimate e;
  e.units = units;
  const double rank_factor = static_cast<double>(simulated_ranks.size()) / kRanksDoublingStepCost;
  e.seconds = (units * kStepSecondsPerUnit + traced * kStepSecondsPerTracedOp + transfers * kStepSecondsPerTransfer) *
              (1 + rank_factor * rank_factor);
  e.bytes = kBaseBytes + plan_ops * kPlanBytesPerOp + traced * kTraceBytesPerEvent + units * kStepBytesPerUnit +
            static_cast<double>(plan.program_of_rank.size()) * kStepBytesPerRank;
  e.actors = static_cast<double>(actors);
  e.what = "a training step of " + std::to_string(simulated_ranks.size()) + " simulated ranks executing " +
           scientific(executed) + " ops and starting " + scientific(flows) + " flows" +
           (transfers < flows ? " (" + scientific(transfers) + " of them run, standing for the rest)" : "");
  return e;
}

namespace {

// What the serving estimate reads off the requests, in one pass over them.
struct RequestTotals {
  double n = 0, decode_steps = 0, prompt_tokens = 0, last_arrival = 0;
  explicit RequestTotals(const std::vector<Request>& requests) : n(static_cast<double>(requests.size())) {
    for (const Request& r : requests) {
      decode_steps += r.output_tokens;
      prompt_tokens += r.prompt_tokens;
      last_arrival = std::max(last_arrival, r.arrival_s);
    }
  }
};

// The iterations the run's replicas take (resource_check.h, estimate_serving).
double serving_iterations(const Scenario& s, const RequestTotals& r) {
  if (r.n == 0) return 0;
  // The replicas that produce tokens: the decode side's with disaggregation.
  const Scenario decoding = s.inference->disaggregation ? instance_scenario(s, InstanceRole::decode) : s;
  const ServingSpec& serving = decoding.inference->serving;
  const double replicas = serving.replicas, full_batch = serving.max_num_seqs;
  const WorkloadSpec& w = s.inference->workload;
  double batch = full_batch;  // sequences an iteration decodes
  if (w.arrival == Arrival::closed_loop && w.trace.empty()) {
    batch = w.concurrency / replicas;  // each replica's share of the clients
  } else if (r.last_arrival > 0) {
    // The steady batch b of a replica that keeps up with its arrivals (rate r, mean output o):
    // it decodes r o tokens a second, b per iteration, and an iteration takes one sequence's
    // decode step t1, plus t_kv for each further sequence's cache read, stretched by the share
    // of the replica's time its prompts' prefill takes: b = r o (t1 + b t_kv) / (1 - r t_prefill),
    // solved by iterating from b = 1 (past the replica's capacity, full batches).
    const IterationModel model(decoding);
    const double rate = r.n / r.last_arrival / replicas, mean_output = r.decode_steps / r.n, mean_prompt = r.prompt_tokens / r.n;
    const double t1 = model.decode_alone(1);
    const double t_kv = std::max(0.0, model.decode_alone(static_cast<int>(mean_prompt + mean_output / 2)) - t1);
    // (with disaggregation the decode side receives its prompts' caches: its prefill is elsewhere)
    const double prefill_share =
        s.inference->disaggregation ? 0.0 : rate * std::max(0.0, model.prefill_alone(static_cast<int>(mean_prompt)) - t1);
    batch = prefill_share < 1 ? 1 : full_batch;
    for (int step = 0; step < 100 && batch < full_batch; ++step)
      batch = rate * mean_output * (t1 + batch * t_kv) / (1 - prefill_share);
  }
  // Every iteration computes at least one token: at most one per output token and prompt.
  return std::min(r.decode_steps + r.n, r.decode_steps / std::clamp(batch, 1.0, full_batch) + r.n);
}

}  // namespace

WorkEstimate estimate_serving(const Scenario& s, const std::vector<Request>& requests) {
  const RequestTotals totals(requests);
  const double records = s.inference->disaggregation ? 2 : 1;  // the prefill side's records too
  const double iterations = serving_iterations(s, totals);
  WorkEstimate e;
  e.units = totals.decode_steps + totals.n;
  e.seconds = e.units * kServingSecondsPerUnit + iterations * kServingSecondsPerIteration;
  // The trace's first iterations, in a vector that grows by doubling (each side's with disaggregation).
  const double logged = records * std::min(iterations, static_cast<double>(ServingRun::kMaxLoggedIterations));
  e.bytes = kBaseBytes + totals.n * (sizeof(Request) + records * sizeof(RequestRecord)) + iterations * kServingBytesPerGapRun +
            logged * 2 * sizeof(ServingRun::Iteration);
  e.what = "a serving run of " + scientific(totals.n) + " requests, " + scientific(totals.decode_steps) +
           " output tokens and about " + scientific(iterations) + " iterations";
  return e;
}

double available_memory_bytes() {
  double available = 0;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    double kib = 0;
    meminfo >> kib;
    if (key == "MemAvailable:") available = kib * 1024;
    meminfo.ignore(64, '\n');
  }
  const double as = address_space_limit();
  if (available <= 0) return as < 1e300 ? as : 1e18;  // unknown: do not refuse on memory
  return std::min(available, as);
}

namespace {

// What a refusal says and where it points.
struct Refusal {
  std::string estimate;  ///< the work, its time and memory
  std::string ways_out;  ///< what to change instead
  std::string lever;     ///< the key to change
  Refusal(const Scenario& scenario, const WorkEstimate& e) {
    estimate = e.what + ": about " + duration_text(e.seconds) + " and " + human_bytes(Bytes(static_cast<std::int64_t>(e.bytes))) +
               " on the reference machine";
    const bool jobs = !scenario.jobs.empty();
    ways_out = jobs                ? "fewer or smaller jobs (each job is simulated at full fidelity, alone and together)"
               : scenario.training ? "simulation.fidelity: fast (one node pair per stage), a larger training.micro_batch "
                                     "(fewer micro-batches), or --backend analytic (memory without a simulation)"
                                   : "fewer inference.workload.requests (the percentiles settle long before a million), "
                                     "or --backend analytic";
    lever = jobs ? "jobs" : scenario.training ? "simulation.fidelity" : "inference.workload.requests";
  }
};

// Located at the scenario file and the key to change, as bad input is (exit 2).
[[noreturn]] void refuse(const Scenario& scenario, const std::string& key, const std::string& message) {
  throw ScenarioError({scenario.source_file}, key, message);
}

}  // namespace

void refuse_beyond_machine(const Scenario& scenario, const WorkEstimate& e) {
  refuse_beyond_memory(scenario, e);
  refuse_beyond_time(scenario, e);
}

void refuse_beyond_memory(const Scenario& scenario, const WorkEstimate& e) {
  const double memory = available_memory_bytes();
  const Refusal r(scenario, e);
  if (e.bytes > memory) {
    refuse(scenario, r.lever, "simulating " + r.estimate + ", more than the " +
                      human_bytes(Bytes(static_cast<std::int64_t>(memory))) + " this machine has free; use " + r.ways_out);
  }
  const double address_space = e.bytes + e.actors * kActorStackBytes;
  if (address_space > address_space_limit()) {
    refuse(scenario, r.lever, "simulating " + r.estimate + ", whose " + std::to_string(static_cast<long>(e.actors)) +
                      " actors' stacks (8 MiB each) make about " +
                      human_bytes(Bytes(static_cast<std::int64_t>(address_space))) + " of address space, more than the " +
                      human_bytes(Bytes(static_cast<std::int64_t>(address_space_limit()))) +
                      " this process may map (ulimit -v); raise the limit, or use " + r.ways_out);
  }
}

void refuse_beyond_time(const Scenario& scenario, const WorkEstimate& e) {
  const double limit_s = scenario.simulation.time_limit.value();
  const Refusal r(scenario, e);
  if (e.seconds > limit_s) {
    refuse(scenario, "simulation.time_limit", "simulating " + r.estimate + ", past simulation.time_limit (" + duration_text(limit_s) +
                      "); raise it to wait, or use " + r.ways_out);
  }
  if (e.seconds > kAnnounceSeconds) std::cerr << "memtwin: simulating " << r.estimate << "\n";
}

}  // namespace memtwin::sim
