#include "sim/job_simulation.h"

#include <memory>
#include <numeric>

#include <simgrid/s4u.hpp>

#include "models/scenario/scenario_error.h"
#include "sim/engine_setup.h"
#include "sim/fidelity_choice.h"
#include "sim/link_meter.h"
#include "sim/platform.h"
#include "sim/resource_check.h"

namespace memtwin::sim {

namespace sg4 = simgrid::s4u;

JobSteps simulate_jobs(const Scenario& deployment, const std::vector<PlacedJob>& jobs) {
  const Cluster& shared = deployment.cluster;
  // Every job's step twice (alone, together), all of them held at once: the estimates add up.
  WorkEstimate all_phases;
  all_phases.what = std::to_string(jobs.size()) + " jobs, each alone then together (";
  long actors = 0;
  for (const PlacedJob& job : jobs) {
    std::vector<int> nodes(static_cast<std::size_t>(job.scenario->cluster.nodes)), ranks(job.gpus.size());
    std::iota(nodes.begin(), nodes.end(), 0);
    std::iota(ranks.begin(), ranks.end(), 0);
    const long job_actors = actors_for(*job.scenario, *job.plan, nodes);
    const WorkEstimate one = estimate_step(*job.plan, ranks, 0, job_actors);
    all_phases.units += 2 * one.units;
    all_phases.seconds += 2 * one.seconds;
    all_phases.bytes += 2 * one.bytes;
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
  auto make = [&](const PlacedJob& job) {
    std::vector<int> nodes(static_cast<std::size_t>(job.scenario->cluster.nodes));
    std::iota(nodes.begin(), nodes.end(), 0);
    return make_plan_run(*job.scenario, *job.plan, 0, nodes, share_of(job));
  };
  // Each job alone, one after another (the platform idle between them), then all of them from one
  // instant: a coordinator starts each phase when the last one's actors have ended.
  std::vector<std::unique_ptr<PlanRun>> alone, together;
  for (const PlacedJob& job : jobs) alone.push_back(make(job));
  for (const PlacedJob& job : jobs) together.push_back(make(job));
  // Each phase's bytes on every link direction: the counters' difference across it.
  std::vector<std::vector<double>> alone_bytes;
  std::vector<double> together_bytes;
  double together_s = 0;
  sg4::Actor::create("jobs", all.cpus.front(), [&] {
    auto run_phase = [&](std::vector<PlanRun*> phase) {
      const std::vector<double> before = counters.read();
      const double began = sg4::Engine::get_clock();
      std::vector<sg4::ActorPtr> actors;
      for (PlanRun* sim : phase) {
        auto started = sim->start_actors();
        actors.insert(actors.end(), started.begin(), started.end());
      }
      for (auto& a : actors) a->join();
      std::vector<double> bytes = counters.read();
      for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] -= before[i];
      together_s = sg4::Engine::get_clock() - began;  // the last phase's is the one kept
      return bytes;
    };
    for (auto& sim : alone) alone_bytes.push_back(run_phase({sim.get()}));
    std::vector<PlanRun*> all_at_once;
    for (auto& sim : together) all_at_once.push_back(sim.get());
    together_bytes = run_phase(all_at_once);
  });
  engine->run();
  JobSteps out;
  const std::vector<LinkSeries>& directions = counters.directions();
  for (std::size_t d = 0; d < directions.size(); ++d) {
    JobSteps::SharedLink shared_link{directions[d].link, directions[d].direction, {}, together_bytes[d], 0.0};
    for (std::size_t j = 0; j < jobs.size(); ++j)
      if (alone_bytes[j][d] > 0) shared_link.jobs.push_back(j);
    if (shared_link.jobs.size() < 2) continue;
    shared_link.utilization = together_s > 0 ? shared_link.bytes / (directions[d].bandwidth * together_s) : 0.0;
    out.shared_links.push_back(std::move(shared_link));
  }
  for (auto& sim : alone) out.alone.push_back(sim->result());
  for (auto& sim : together) out.together.push_back(sim->result());
  return out;
}

}  // namespace memtwin::sim
