#include "sim/serving_simulation.h"

#include <algorithm>
#include <stdexcept>

#include "models/memory/serving_memory.h"
#include "models/serving/batch_scheduler.h"
#include "models/serving/iteration_cost.h"
#include "models/serving/router.h"
#include "sim/engine_setup.h"
#include "sim/resource_check.h"
#include "sim/serving_replicas.h"

namespace memtwin::sim {

// The run's records, its replicas and the router's bookkeeping, which the actors share.
struct ServingSession::State {
  State(const Scenario& scenario, const std::vector<Request>& requests, const Platform& on, Progress* reporter)
      : s(scenario), inf(*scenario.inference), platform(on), progress(reporter), model(scenario),
        kv(make_kv_compressor(inf.kv_cache.compression, serving_kv_shape(s))), router(inf.serving.router, static_cast<std::size_t>(inf.serving.replicas)),
        closed_loop(inf.workload.arrival == Arrival::closed_loop && inf.workload.trace.empty()) {
    if (inf.disaggregation) throw std::logic_error("ServingSession: a disaggregated deployment (simulate_disaggregated_serving)");
    const ServingMemory memory = serving_memory(s);
    out = start_serving_run(requests);
    out.capacity_blocks = memory.capacity_blocks;
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
    const std::int64_t capacity_blocks = std::max<std::int64_t>(1, memory.capacity_blocks);
    if (model.lockstep_replicas() > 1) {
      groups.push_back(make_expert_parallel_group(s, model, *kv, out, capacity_blocks, memory.block_bytes.as_double(), platform,
                                                  std::move(placements)));
    } else {
      for (int r = 0; r < inf.serving.replicas; ++r) {
        groups.push_back(make_replica(r, s, model, *kv, out, capacity_blocks, memory.block_bytes.as_double(), platform,
                                      std::move(placements[r])));
      }
    }
    for (auto& g : groups)
      for (int m = 0; m < g->replicas(); ++m) seats.push_back({g.get(), m});
    for (auto& g : groups) {
      g->on_finish([this](std::size_t) {  // a completion or a rejection
        ++finished;
        if (progress) progress->report(finished, out.requests.size(), "requests");
        if (closed_loop && next < out.requests.size()) route(next++);
        if (finished >= out.requests.size()) close_all();
      });
    }
  }

  void route(std::size_t record) {
    const std::size_t pick = router.pick([this](std::size_t r) { return seats[r].group->outstanding(seats[r].member); },
                                         [this](std::size_t r) { return seats[r].group->used_blocks(seats[r].member); });
    out.requests[record].replica = static_cast<int>(pick);
    out.requests[record].arrival_s = sg4::Engine::get_clock();
    seats[pick].group->enqueue(seats[pick].member, record, out.requests[record].prompt_tokens);
  }
  void close_all() {
    for (auto& g : groups) g->close();
  }

  const Scenario& s;
  const Inference& inf;
  const Platform& platform;
  Progress* progress;
  ServingRun out;
  const IterationModel model;
  std::unique_ptr<KvCompressor> kv;
  std::vector<std::unique_ptr<ReplicaGroup>> groups;
  // Replica r, as the router numbers them: member `member` of group `group`.
  struct Seat {
    ReplicaGroup* group;
    int member;
  };
  std::vector<Seat> seats;
  ReplicaRouter router;
  const bool closed_loop;
  std::size_t next = 0, finished = 0;
  double began_s = 0, router_ended_s = 0;
};

ServingSession::ServingSession(const Scenario& scenario, const std::vector<Request>& requests, const Platform& platform,
                               Progress* progress)
    : state_(std::make_unique<State>(scenario, requests, platform, progress)) {}

ServingSession::~ServingSession() = default;

std::vector<sg4::ActorPtr> ServingSession::start() {
  State& st = *state_;
  st.began_s = sg4::Engine::get_clock();
  std::vector<sg4::ActorPtr> actors{start_router(st.platform, st.inf, st.out, st.next, [&st](std::size_t r) { st.route(r); },
                                                 [&st] { st.close_all(); }, st.router_ended_s)};
  for (std::size_t i = 0, first = 0; i < st.groups.size(); first += st.groups[i]->replicas(), ++i) {
    for (auto& a : st.groups[i]->start(st.platform, static_cast<int>(first))) actors.push_back(std::move(a));
  }
  return actors;
}

ServingRun ServingSession::finish() {
  State& st = *state_;
  std::vector<const ReplicaGroup*> engines;
  for (const auto& g : st.groups) engines.push_back(g.get());
  end_serving_run(st.out, st.began_s, st.router_ended_s, engines, st.closed_loop);
  return std::move(st.out);
}

ServingRun simulate_serving(const Scenario& s, Progress* progress) {
  const std::vector<Request> requests = generate_requests(*s.inference, s.seed);
  refuse_beyond_machine(s, estimate_serving(s, requests));
  auto engine = make_engine();
  const Platform platform = build_platform(s.cluster);
  ServingSession session(s, requests, platform, progress);
  session.start();
  engine->run();
  return session.finish();
}

}  // namespace memtwin::sim
