#include "sim/serving_simulation.h"

#include <algorithm>
#include <memory>
#include <stdexcept>

#include <simgrid/s4u.hpp>

#include "models/memory/serving_memory.h"
#include "models/serving/batch_scheduler.h"
#include "models/serving/iteration_cost.h"
#include "models/serving/request_stream.h"
#include "models/serving/router.h"
#include "sim/engine_setup.h"
#include "sim/platform.h"
#include "sim/resource_check.h"
#include "sim/serving_replicas.h"

namespace memtwin::sim {

ServingRun simulate_serving(const Scenario& s, Progress* progress) {
  const Inference& inf = *s.inference;
  if (inf.disaggregation) throw std::logic_error("simulate_serving: a disaggregated deployment (simulate_disaggregated_serving)");
  const ServingMemory memory = serving_memory(s);
  std::vector<Request> requests = generate_requests(inf, s.seed);
  refuse_beyond_machine(s, estimate_serving(requests));
  ServingRun out = start_serving_run(std::move(requests));
  out.capacity_blocks = memory.capacity_blocks;
  auto engine = make_engine();
  const Platform platform = build_platform(s.cluster);
  // Replica r takes the next tensor x pipeline GPUs, in rank order (the loader checks they exist).
  const int tp = inf.serving.tensor_parallel, pp = inf.serving.pipeline_parallel, per_replica = tp * pp;
  std::vector<Placement> placements;
  for (int r = 0; r < inf.serving.replicas; ++r) {
    Placement p;
    for (int g = 0; g < per_replica; ++g) p.gpus.push_back(r * per_replica + g);
    for (int stage = 0; stage < pp; ++stage) {
      p.stages.emplace_back(p.gpus.begin() + stage * tp, p.gpus.begin() + (stage + 1) * tp);
      if (pp > 1) p.stage_locks.push_back(sg4::Mutex::create());
    }
    p.node = platform.node_of_gpu[p.gpus.front()];
    placements.push_back(std::move(p));
  }

  const IterationModel model(s);
  const KvShape shape = serving_kv_shape(s);
  auto kv = make_kv_compressor(inf.kv_cache.compression, shape);
  const std::int64_t capacity_blocks = std::max<std::int64_t>(1, memory.capacity_blocks);
  std::vector<std::unique_ptr<ReplicaGroup>> groups;
  if (model.lockstep_replicas() > 1) {
    groups.push_back(make_expert_parallel_group(s, model, *kv, out, capacity_blocks, memory.block_bytes.as_double(),
                                                           platform, std::move(placements)));
  } else {
    for (int r = 0; r < inf.serving.replicas; ++r) {
      groups.push_back(make_replica(r, s, model, *kv, out, capacity_blocks, memory.block_bytes.as_double(),
                                                 platform, std::move(placements[r])));
    }
  }
  // Replica r, as the router numbers them: member `member` of group `group`.
  struct Seat {
    ReplicaGroup* group;
    int member;
  };
  std::vector<Seat> seats;
  for (auto& g : groups)
    for (int m = 0; m < g->replicas(); ++m) seats.push_back({g.get(), m});
  auto outstanding = [&](std::size_t r) { return seats[r].group->outstanding(seats[r].member); };
  auto used_blocks = [&](std::size_t r) { return seats[r].group->used_blocks(seats[r].member); };
  auto close_all = [&] {
    for (auto& g : groups) g->close();
  };
  ReplicaRouter router(inf.serving.router, seats.size());
  auto route = [&](std::size_t record) {
    const std::size_t pick = router.pick(outstanding, used_blocks);
    out.requests[record].replica = static_cast<int>(pick);
    out.requests[record].arrival_s = sg4::Engine::get_clock();
    seats[pick].group->enqueue(seats[pick].member, record, out.requests[record].prompt_tokens);
  };

  const bool closed_loop = inf.workload.arrival == Arrival::closed_loop && inf.workload.trace.empty();
  std::size_t next = 0, finished = 0;
  for (auto& g : groups) {
    g->on_finish([&](std::size_t) {  // a completion or a rejection
      ++finished;
      if (progress) progress->report(finished, out.requests.size(), "requests");
      if (closed_loop && next < out.requests.size()) route(next++);
      if (finished >= out.requests.size()) close_all();
    });
  }
  double router_ended_s = 0;
  start_router(platform, inf, out, next, route, close_all, router_ended_s);
  for (std::size_t i = 0, first = 0; i < groups.size(); first += groups[i]->replicas(), ++i) {
    groups[i]->start(platform, static_cast<int>(first));
  }
  engine->run();
  // The run ends with its last iteration (background copies still draining do not count).
  out.makespan_s = router_ended_s;
  for (const auto& g : groups) out.makespan_s = std::max(out.makespan_s, g->ended_s());
  if (closed_loop) out.last_arrival_s = out.makespan_s;
  return out;
}

}  // namespace memtwin::sim
