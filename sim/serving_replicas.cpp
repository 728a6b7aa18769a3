#include "sim/serving_replicas.h"

#include <algorithm>
#include <string>

#include "models/serving/iteration_plan.h"

namespace memtwin::sim {

// Tensor parallelism's two all-reduces of the hidden states per layer of a stage, one after
// another: the flows of one ring carrying all of them, each call priced by the collective model.
CollectivePlan tensor_parallel_all_reduces(const Scenario& s, const IterationModel& model, const IterationLoad& load,
                                           const std::vector<int>& ring, int stages, const Platform& platform) {
  return plan_collective(Collective::all_reduce, ring, model.tp_all_reduce_bytes(load), platform.node_of_gpu, s.cluster,
                         model.tp_all_reduces() / stages);
}

namespace {

// One scheduler of a replica as an actor (a replica with pipeline stages has one per stage, vLLM's
// virtual engines, whose batches follow each other through the stages): the shared scheduler
// decides; SimGrid's clock advances by the iteration's transfers, kernels and all-reduces.
class VirtualEngine {
 public:
  VirtualEngine(int replica, int engine, const Scenario& s, const IterationModel& model, const KvCompressor& kv,
                ServingRun& out, std::int64_t capacity_blocks, double block_bytes, const Platform& platform,
                const Placement& placement)
      : s_(s), model_(model), plan_(s), out_(out),
        scheduler_(replica, s, kv, out, capacity_blocks, block_bytes, engine, static_cast<int>(placement.stages.size())),
        platform_(platform), placement_(placement), transfers_(s, platform, placement) {}

  void enqueue(std::size_t record, int prompt) {
    scheduler_.enqueue(record, prompt);
    sleeper_.wake();
  }
  [[nodiscard]] std::size_t outstanding() const { return scheduler_.outstanding(); }
  [[nodiscard]] std::int64_t used_blocks() const { return scheduler_.used_blocks(); }
  void close() {
    closed_ = true;
    sleeper_.wake();
  }
  void on_finish(std::function<void(std::size_t)> f) { scheduler_.on_finish = std::move(f); }
  void on_prefill_start(std::function<void(std::size_t)> f) { scheduler_.on_prefill_start = std::move(f); }
  [[nodiscard]] double ended_s() const { return ended_s_; }

  void run() {
    for (;;) {
      auto it = scheduler_.schedule();
      if (!it) {
        if (closed_ && scheduler_.outstanding() == 0) break;
        sleeper_.sleep();
        continue;
      }
      const double began = sg4::Engine::get_clock();
      transfers_.start_background(it->tier);
      transfers_.before(*it);
      const IterationOpSeconds work = model_.compute_breakdown(it->load);
      run_stages(it->load, work.total());
      out_.op_seconds += work;
      out_.planned_op_kinds |= plan_.kinds(it->load);
      scheduler_.complete(*it, began, sg4::Engine::get_clock());
    }
    ended_s_ = sg4::Engine::get_clock();
    transfers_.drain();
  }

 private:
  // Each stage in turn (waiting while another engine's batch holds it): its share of the kernels,
  // then its share of tensor parallelism's all-reduces, then the hidden states to the next stage.
  void run_stages(const IterationLoad& load, double compute_seconds) const {
    const auto stages = static_cast<int>(placement_.stages.size());
    const double tokens = load.prefill_tokens + load.decode_sequences;
    for (int stage = 0; stage < stages; ++stage) {
      if (stages > 1) placement_.stage_locks[stage]->lock();
      sg4::this_actor::sleep_for(compute_seconds / stages);
      if (model_.tp_all_reduces() > 0) {
        const double began = sg4::Engine::get_clock();
        run_collective(tensor_parallel_all_reduces(s_, model_, load, placement_.stages[stage], stages, platform_), platform_);
        out_.op_seconds[IterationOp::collective] += sg4::Engine::get_clock() - began;
      }
      if (stages > 1) placement_.stage_locks[stage]->unlock();
      if (stage + 1 < stages) {
        sg4::Comm::sendto(platform_.gpus[placement_.stages[stage].front()], platform_.gpus[placement_.stages[stage + 1].front()],
                          static_cast<std::uint64_t>(tokens * s_.model.hidden * 2));
      }
    }
  }

  const Scenario& s_;
  const IterationModel& model_;
  const IterationPlan plan_;  // which ops each iteration runs (the plan hash names them)
  ServingRun& out_;
  BatchScheduler scheduler_;
  const Platform& platform_;
  const Placement& placement_;
  ReplicaTransfers transfers_;
  Sleeper sleeper_;
  bool closed_ = false;
  double ended_s_ = 0;
};

// A replica on its own: its virtual engines (one without pipeline stages); a request goes to the
// one with the fewest unfinished requests, as vLLM's engine picks a scheduler.
class Replica final : public ReplicaGroup {
 public:
  Replica(int index, const Scenario& s, const IterationModel& model, const KvCompressor& kv, ServingRun& out,
          std::int64_t capacity_blocks, double block_bytes, const Platform& platform, Placement placement)
      : placement_(std::move(placement)) {
    const auto engines = static_cast<int>(placement_.stages.size());
    for (int e = 0; e < engines; ++e) {
      engines_.push_back(std::make_unique<VirtualEngine>(index, e, s, model, kv, out,
                                                         std::max<std::int64_t>(1, capacity_blocks / engines), block_bytes,
                                                         platform, placement_));
    }
  }
  [[nodiscard]] int replicas() const override { return 1; }
  void enqueue(int, std::size_t record, int prompt) override {
    auto pick = std::min_element(engines_.begin(), engines_.end(),
                                 [](const auto& a, const auto& b) { return a->outstanding() < b->outstanding(); });
    (*pick)->enqueue(record, prompt);
  }
  [[nodiscard]] std::size_t outstanding(int) const override {
    std::size_t n = 0;
    for (const auto& e : engines_) n += e->outstanding();
    return n;
  }
  [[nodiscard]] std::int64_t used_blocks(int) const override {
    std::int64_t n = 0;
    for (const auto& e : engines_) n += e->used_blocks();
    return n;
  }
  void close() override {
    for (auto& e : engines_) e->close();
  }
  void on_prefill_start(const std::function<void(std::size_t)>& f) override {
    for (auto& e : engines_) e->on_prefill_start(f);
  }
  void on_finish(const std::function<void(std::size_t)>& f) override {
    for (auto& e : engines_) e->on_finish(f);
  }
  [[nodiscard]] double ended_s() const override {
    double t = 0;
    for (const auto& e : engines_) t = std::max(t, e->ended_s());
    return t;
  }
  std::vector<sg4::ActorPtr> start(const Platform& platform, int index) override {
    std::vector<sg4::ActorPtr> actors;
    for (std::size_t e = 0; e < engines_.size(); ++e) {
      actors.push_back(sg4::Actor::create("replica" + std::to_string(index) + ".engine" + std::to_string(e),
                         platform.gpus[placement_.gpus.front()], [this, e] { engines_[e]->run(); }));
    }
    return actors;
  }

 private:
  Placement placement_;
  std::vector<std::unique_ptr<VirtualEngine>> engines_;
};

}  // namespace

std::unique_ptr<ReplicaGroup> make_replica(int index, const Scenario& s, const IterationModel& model, const KvCompressor& kv,
                                           ServingRun& out, std::int64_t capacity_blocks, double block_bytes,
                                           const Platform& platform, Placement placement) {
  return std::make_unique<Replica>(index, s, model, kv, out, capacity_blocks, block_bytes, platform, std::move(placement));
}

void end_serving_run(ServingRun& out, double began_s, double router_ended_s, const std::vector<const ReplicaGroup*>& engines,
                     bool closed_loop) {
  out.makespan_s = router_ended_s;
  for (const ReplicaGroup* g : engines) out.makespan_s = std::max(out.makespan_s, g->ended_s());
  if (closed_loop) out.last_arrival_s = out.makespan_s;
  out.count_times_from(began_s);
}

sg4::ActorPtr start_router(const Platform& platform, const Inference& inf, ServingRun& out, std::size_t& next,
                           std::function<void(std::size_t)> route, std::function<void()> close_all, double& ended_s) {
  return sg4::Actor::create("router", platform.cpus[0], [&inf, &out, &next, route = std::move(route),
                                                         close_all = std::move(close_all), &ended_s] {
    const double origin = sg4::Engine::get_clock();  // 0 for a run of its own
    const std::size_t total = out.requests.size();
    if (inf.workload.arrival == Arrival::closed_loop && inf.workload.trace.empty()) {
      const std::size_t initial = std::min<std::size_t>(inf.workload.concurrency, total);
      while (next < initial) route(next++);
    } else {
      for (; next < total; ++next) {
        const double wait = origin + out.requests[next].arrival_s - sg4::Engine::get_clock();
        if (wait > 0) sg4::this_actor::sleep_for(wait);
        route(next);
      }
      out.last_arrival_s = sg4::Engine::get_clock();
    }
    if (total == 0) close_all();
    ended_s = sg4::Engine::get_clock();
  });
}

}  // namespace memtwin::sim
