#include "sim/job_simulation.h"

#include <cmath>
#include <exception>
#include <memory>
#include <numeric>

#include <simgrid/s4u.hpp>

#include "models/scenario/scenario_error.h"
#include "models/serving/request_stream.h"
#include "sim/disaggregated_serving.h"
#include "sim/engine_setup.h"
#include "sim/fidelity_choice.h"
#include "sim/link_meter.h"
#include "sim/platform.h"
#include "sim/resource_check.h"
#include "sim/serving_simulation.h"

namespace memtwin::sim {

namespace sg4 = simgrid::s4u;

namespace {

// A serving deployment's actors: its router and one per replica's virtual engine (an expert-
// parallel group has one for all its replicas: fewer), or per disaggregated instance (and one per
// KV transfer under way, which come and go).
long serving_actor_count(const Scenario& s) {
  const Inference& inf = *s.inference;
  if (inf.disaggregation) return 1 + inf.disaggregation->prefill_replicas + inf.disaggregation->decode_replicas;
  return 1 + static_cast<long>(inf.serving.replicas) * inf.serving.pipeline_parallel;
}

// A serving job's run on its share of the platform, colocated or disaggregated.
class ServedJob {
 public:
  ServedJob(const Scenario& s, const std::vector<Request>& requests, const Platform& share) {
    if (s.inference->disaggregation) {
      split_ = std::make_unique<DisaggregatedSession>(s, requests, share);
    } else {
      colocated_ = std::make_unique<ServingSession>(s, requests, share);
    }
  }
  std::vector<sg4::ActorPtr> start() { return split_ ? split_->start() : colocated_->start(); }
  /// The run (every request), and a disaggregated one's prefill side's kinds of work.
  std::pair<ServingRun, IterationOpKinds> finish() {
    if (!split_) return {colocated_->finish(), 0};
    DisaggregatedRun both = split_->finish();
    return {std::move(both.run), both.prefill_run.planned_op_kinds};
  }

 private:
  std::unique_ptr<ServingSession> colocated_;
  std::unique_ptr<DisaggregatedSession> split_;
};

void add(WorkEstimate& total, const WorkEstimate& one, double times) {
  total.units += times * one.units;
  total.seconds += times * one.seconds;
  total.bytes += times * one.bytes;
}

}  // namespace

JobSteps simulate_jobs(const Scenario& deployment, const std::vector<PlacedJob>& jobs) {
  const Cluster& shared = deployment.cluster;
  // Every job twice (alone, together), all of them held at once: the estimates add up.
  WorkEstimate all_phases;
  all_phases.what = std::to_string(jobs.size()) + " jobs, each alone then together (";
  std::vector<WorkEstimate> step_estimates(jobs.size());
  std::vector<std::vector<Request>> requests(jobs.size());
  long actors = 0;
  bool serving = false;
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    const PlacedJob& job = jobs[j];
    long job_actors = 0;
    WorkEstimate one;
    if (job.plan) {
      std::vector<int> nodes(static_cast<std::size_t>(job.scenario->cluster.nodes)), ranks(job.gpus.size());
      std::iota(nodes.begin(), nodes.end(), 0);
      std::iota(ranks.begin(), ranks.end(), 0);
      job_actors = actors_for(*job.scenario, *job.plan, nodes);
      one = estimate_step(*job.plan, job.scenario->cluster, ranks, 0, job_actors);
      step_estimates[j] = one;
    } else {
      serving = true;
      requests[j] = generate_requests(*job.scenario->inference, job.scenario->seed);
      job_actors = serving_actor_count(*job.scenario);
      one = estimate_serving(*job.scenario, requests[j]);
    }
    add(all_phases, one, 2);
    all_phases.actors += job_actors;
    all_phases.what += (actors > 0 ? "; " : "") + one.what;
    actors += job_actors;
  }
  all_phases.what += ")";
  const long maps = max_memory_maps(), spare = 4096;
  // The together phase runs every job's actors at once.
  if (actors + spare > maps) {
    throw ScenarioError({deployment.source_file}, "jobs",
                        "simulating the jobs together needs " + std::to_string(actors) + " SimGrid actors, more than this "
                        "machine's memory maps allow (vm.max_map_count = " + std::to_string(maps) + "); place fewer or smaller "
                        "jobs, or raise vm.max_map_count");
  }
  refuse_beyond_machine(deployment, all_phases);
  auto engine = make_engine(2 * actors + spare <= maps);
  LinkMeter::enable();
  const Platform all = build_platform(shared);
  const LinkCounters counters(all.links);
  // A job's share of the platform: its ranks' GPUs by slot, its nodes' CPUs and disks.
  auto share_of = [&](const PlacedJob& job) {
    Platform p;
    const int per_node = job.scenario->cluster.gpus_per_node;
    for (std::size_t rank = 0; rank < job.gpus.size(); ++rank) {
      const int gpu = job.gpus[rank];
      p.gpus.push_back(all.gpus[static_cast<std::size_t>(gpu)]);
      p.node_of_gpu.push_back(static_cast<int>(rank) / per_node);
      if (rank % static_cast<std::size_t>(per_node) == 0) {
        const int node = gpu / shared.gpus_per_node;
        p.cpus.push_back(all.cpus[static_cast<std::size_t>(node)]);
        if (!all.nvme.empty()) p.nvme.push_back(all.nvme[static_cast<std::size_t>(node)]);
      }
    }
    return p;
  };
  std::vector<Platform> shares;
  for (const PlacedJob& job : jobs) shares.push_back(share_of(job));
  auto make_step = [&](std::size_t j) {
    std::vector<int> nodes(static_cast<std::size_t>(jobs[j].scenario->cluster.nodes));
    std::iota(nodes.begin(), nodes.end(), 0);
    return make_plan_run(*jobs[j].scenario, *jobs[j].plan, 0, nodes, shares[j]);
  };
  // Each job alone, one after another (the platform idle between them), then all of them from one
  // instant: a coordinator starts each phase when the last one's actors have ended.
  struct Phases {
    std::unique_ptr<PlanRun> step_alone, step_together;
    std::unique_ptr<ServedJob> served_alone, served_together;
  };
  std::vector<Phases> phases(jobs.size());
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    if (jobs[j].plan) {
      phases[j].step_alone = make_step(j);
      phases[j].step_together = make_step(j);
    } else {
      phases[j].served_alone = std::make_unique<ServedJob>(*jobs[j].scenario, requests[j], shares[j]);
      phases[j].served_together = std::make_unique<ServedJob>(*jobs[j].scenario, requests[j], shares[j]);
    }
  }
  JobSteps out;
  out.jobs.resize(jobs.size());
  // Each phase's bytes on every link direction: the counters' difference across it.
  std::vector<std::vector<double>> alone_bytes;
  std::vector<double> together_bytes;
  double together_s = 0;
  std::exception_ptr failed;  // thrown inside an actor: rethrown once the engine has stopped
  sg4::Actor::create("jobs", all.cpus.front(), [&] {
    auto bytes_since = [&](const std::vector<double>& before) {
      std::vector<double> bytes = counters.read();
      for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] -= before[i];
      return bytes;
    };
    auto join = [](const std::vector<sg4::ActorPtr>& started) {
      for (const auto& a : started) a->join();
    };
    double serving_span = 0;  // the longest serving job's run alone
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      const std::vector<double> before = counters.read();
      if (jobs[j].plan) {
        join(phases[j].step_alone->start_actors());
      } else {
        join(phases[j].served_alone->start());
        out.jobs[j].served_alone = phases[j].served_alone->finish().first;
        serving_span = std::max(serving_span, out.jobs[j].served_alone->makespan_s);
      }
      alone_bytes.push_back(bytes_since(before));
    }
    // Beside serving jobs a training job runs step after step until they end: how many steps each
    // takes alone in that time, checked against the limits before they run.
    if (serving) {
      WorkEstimate steps;
      std::string which;
      for (std::size_t j = 0; j < jobs.size(); ++j) {
        if (!jobs[j].plan) continue;
        out.jobs[j].alone = phases[j].step_alone->result();
        const double n = std::ceil(serving_span / std::max(out.jobs[j].alone.step_s, 1e-9));
        steps.units += n * step_estimates[j].units;
        steps.seconds += n * step_estimates[j].seconds;
        steps.bytes += step_estimates[j].bytes;  // one step at a time: one more step's memory at once
        which += (which.empty() ? "" : ", ") + std::to_string(static_cast<long>(n)) + " steps of " + jobs[j].scenario->name;
      }
      steps.what = "the training jobs' steps while the serving jobs run (" + which + ")";
      try {
        WorkEstimate whole = all_phases;
        add(whole, steps, 1);
        whole.actors = all_phases.actors;
        whole.what = all_phases.what + " and " + steps.what;
        refuse_beyond_machine(deployment, whole);
      } catch (...) {
        failed = std::current_exception();
        return;
      }
    }
    const std::vector<double> before = counters.read();
    const double began = sg4::Engine::get_clock();
    LinkMeter meter(counters, all.cpus.front());  // the together phase's link load over time
    std::vector<std::vector<sg4::ActorPtr>> first_steps(jobs.size());
    std::vector<sg4::ActorPtr> serving_actors;
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      if (jobs[j].plan) {
        first_steps[j] = phases[j].step_together->start_actors();
      } else {
        for (auto& a : phases[j].served_together->start()) serving_actors.push_back(std::move(a));
      }
    }
    bool serving_over = !serving;
    std::vector<sg4::ActorPtr> steppers;
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      if (!jobs[j].plan) continue;
      steppers.push_back(sg4::Actor::create("job" + std::to_string(j) + ".steps", all.cpus.front(), [&, j] {
        join(first_steps[j]);
        JobOutcome& o = out.jobs[j];
        o.steps_together = 1;
        if (!serving) return;  // one step together is the answer (read once the engine has stopped)
        try {
          o.together = phases[j].step_together->result();
          double step_s = o.together.step_s, comm_s = o.together.comm_busy_s;
          while (!serving_over) {
            const std::unique_ptr<PlanRun> next = make_step(j);
            join(next->start_actors());
            const StepSimulation step = next->result();
            step_s += step.step_s;
            comm_s += step.comm_busy_s;
            if (step.oom && !o.together.oom) o.together.oom = step.oom;
            ++o.steps_together;
          }
          o.together.step_s = step_s / o.steps_together;
          o.together.comm_busy_s = comm_s / o.steps_together;
        } catch (...) {
          failed = std::current_exception();
        }
      }));
    }
    join(serving_actors);
    serving_over = true;
    join(steppers);
    together_bytes = bytes_since(before);
    together_s = sg4::Engine::get_clock() - began;
    out.together_load = meter.finish();
  });
  engine->run();
  if (failed) std::rethrow_exception(failed);
  const std::vector<LinkSeries>& directions = counters.directions();
  for (std::size_t d = 0; d < directions.size(); ++d) {
    JobSteps::SharedLink shared_link{directions[d].link, directions[d].direction, {}, together_bytes[d], 0.0};
    for (std::size_t j = 0; j < jobs.size(); ++j)
      if (alone_bytes[j][d] > 0) shared_link.jobs.push_back(j);
    if (shared_link.jobs.size() < 2) continue;
    shared_link.utilization = together_s > 0 ? shared_link.bytes / (directions[d].bandwidth * together_s) : 0.0;
    out.shared_links.push_back(std::move(shared_link));
  }
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    JobOutcome& o = out.jobs[j];
    if (jobs[j].plan) {
      if (!serving) {
        o.alone = phases[j].step_alone->result();
        o.together = phases[j].step_together->result();
      }
    } else {
      auto [run, prefill_kinds] = phases[j].served_together->finish();
      o.served_together = std::move(run);
      o.prefill_op_kinds = prefill_kinds;
    }
  }
  return out;
}

}  // namespace memtwin::sim
