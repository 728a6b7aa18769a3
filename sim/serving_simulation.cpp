#include "sim/serving_simulation.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include <simgrid/s4u.hpp>

#include "models/memory/serving_memory.h"
#include "models/serving/batch_scheduler.h"
#include "models/serving/iteration_cost.h"
#include "models/serving/iteration_plan.h"
#include "models/serving/request_stream.h"
#include "sim/collectives.h"
#include "sim/engine_setup.h"
#include "sim/resource_check.h"
#include "sim/platform.h"

namespace memtwin::sim {

namespace sg4 = simgrid::s4u;

namespace {

// Where a replica runs: its GPUs (slots of the platform, stage by stage; each reaches its own
// node's host memory) and the NVMe its tiers use; with pipeline stages, a lock per stage so that
// one batch at a time runs on it.
struct Placement {
  std::vector<int> gpus;                   ///< all the replica's GPUs (the KV is spread over them)
  std::vector<std::vector<int>> stages;    ///< each stage's tensor-parallel group
  std::vector<sg4::MutexPtr> stage_locks;  ///< empty without pipeline stages
  int node = 0;                            ///< the first GPU's node: whose NVMe holds the replica's tier
};

// A replica's copies to and from its tiers. The scheduler counts one GPU's bytes (a replica's
// block is a block on each of its GPUs): every GPU of the replica moves that much over its own PCIe
// link, and the node's NVMe serves them all.
class ReplicaTransfers {
 public:
  ReplicaTransfers(const Scenario& s, const Platform& platform, const Placement& placement)
      : s_(s), platform_(platform), placement_(placement) {}

  // What the iteration waits for: swaps and prefix offloads leaving the GPU, prefix fetches
  // (their NVMe part read first) and swap-ins coming back.
  void before(const ScheduledIteration& it) {
    std::vector<sg4::CommPtr> comms;
    pcie_async(it.swap_out_bytes + it.tier.gpu_to_host, false, comms);
    if (it.tier.nvme_to_host > 0) {
      sg4::this_actor::sleep_for(s_.cluster.nvme->latency.value());
      platform_.nvme.at(placement_.node)->read(nvme_bytes(it.tier.nvme_to_host));
    }
    pcie_async(it.swap_in_bytes + it.tier.host_to_gpu, true, comms);
    for (auto& c : comms) c->wait();
  }
  [[nodiscard]] static bool waits_before(const ScheduledIteration& it) {
    return it.swap_out_bytes + it.tier.gpu_to_host + it.tier.nvme_to_host + it.swap_in_bytes + it.tier.host_to_gpu > 0;
  }

  // Demotions to NVMe and proactive copies of idle prefixes overlap the iteration (and contend
  // with later transfers on the same links and disk).
  void start_background(const TierTransfers& tier) {
    auto done = [](const auto& a) { return a->test(); };  // reaps finished copies
    std::erase_if(background_comms_, done);
    std::erase_if(background_io_, done);
    pcie_async(tier.background_gpu_to_host, false, background_comms_);
    if (tier.host_to_nvme > 0) {
      background_io_.push_back(platform_.nvme.at(placement_.node)->write_async(nvme_bytes(tier.host_to_nvme)));
    }
  }
  void drain() {
    for (auto& c : background_comms_) c->wait();
    for (auto& io : background_io_) io->wait();
  }

 private:
  void pcie_async(double bytes_per_gpu, bool to_gpu, std::vector<sg4::CommPtr>& into) const {
    if (bytes_per_gpu <= 0) return;
    const auto bytes = static_cast<std::uint64_t>(bytes_per_gpu);
    for (int slot : placement_.gpus) {
      auto* gpu = platform_.gpus[slot];
      auto* cpu = platform_.cpus[platform_.node_of_gpu[slot]];  // its own node's host memory
      into.push_back(to_gpu ? sg4::Comm::sendto_async(cpu, gpu, bytes) : sg4::Comm::sendto_async(gpu, cpu, bytes));
    }
  }
  [[nodiscard]] sg_size_t nvme_bytes(double bytes_per_gpu) const {
    return static_cast<sg_size_t>(bytes_per_gpu * static_cast<double>(placement_.gpus.size()));
  }
  const Scenario& s_;
  const Platform& platform_;
  const Placement& placement_;
  std::vector<sg4::CommPtr> background_comms_;
  std::vector<sg4::IoPtr> background_io_;
};

// Tensor parallelism's two all-reduces of the hidden states per layer of a stage, one after
// another: the flows of one ring carrying all of them, each call priced by the collective model.
CollectivePlan tensor_parallel_all_reduces(const Scenario& s, const IterationModel& model, const IterationLoad& load,
                                           const std::vector<int>& ring, int stages, const Platform& platform) {
  return plan_collective(Collective::all_reduce, ring, model.tp_all_reduce_bytes(load), platform.node_of_gpu, s.cluster,
                         model.tp_all_reduces() / stages);
}

// An actor that a suspended engine waits in until there is work.
class Sleeper {
 public:
  void sleep() {
    idle_actor_ = sg4::Actor::self();
    sg4::this_actor::suspend();
  }
  void wake() {
    if (idle_actor_) {
      auto a = idle_actor_;
      idle_actor_ = nullptr;
      a->resume();
    }
  }

 private:
  sg4::ActorPtr idle_actor_;
};

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
        run_collective(tensor_parallel_all_reduces(s_, model_, load, placement_.stages[stage], stages, platform_), platform_);
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

// What the router and the end of the run see: replicas to send requests to, and the actors that
// serve them.
class ReplicaGroup {
 public:
  virtual ~ReplicaGroup() = default;
  [[nodiscard]] virtual int replicas() const = 0;
  virtual void enqueue(int member, std::size_t record, int prompt) = 0;
  [[nodiscard]] virtual std::size_t outstanding(int member) const = 0;
  [[nodiscard]] virtual std::int64_t used_blocks(int member) const = 0;
  virtual void close() = 0;
  virtual void on_finish(const std::function<void(std::size_t)>& f) = 0;
  [[nodiscard]] virtual double ended_s() const = 0;
  virtual void start(const Platform& platform, int first_replica) = 0;
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
  void on_finish(const std::function<void(std::size_t)>& f) override {
    for (auto& e : engines_) e->on_finish(f);
  }
  [[nodiscard]] double ended_s() const override {
    double t = 0;
    for (const auto& e : engines_) t = std::max(t, e->ended_s());
    return t;
  }
  void start(const Platform& platform, int index) override {
    for (std::size_t e = 0; e < engines_.size(); ++e) {
      sg4::Actor::create("replica" + std::to_string(index) + ".engine" + std::to_string(e),
                         platform.gpus[placement_.gpus.front()], [this, e] { engines_[e]->run(); });
    }
  }

 private:
  Placement placement_;
  std::vector<std::unique_ptr<VirtualEngine>> engines_;
};

// Replicas whose MoE layers share their experts (inference.serving.expert_parallel), stepped
// together by one actor as vLLM's data-parallel coordinator does: while any replica has a batch,
// every replica runs an iteration, a one-token dummy batch where it has none. Each iteration's
// kernels last as long as the slowest replica's (each layer's experts wait for every replica's
// tokens); then the replicas' tensor-parallel all-reduces, each on its own GPUs; then the group's
// all-gathers of the hidden states and reduce-scatters of the experts' outputs, one group per
// tensor rank.
class ExpertParallelGroup final : public ReplicaGroup {
 public:
  ExpertParallelGroup(const Scenario& s, const IterationModel& model, const KvCompressor& kv, ServingRun& out,
                      std::int64_t capacity_blocks, double block_bytes, const Platform& platform,
                      std::vector<Placement> placements)
      : s_(s), model_(model), plan_(s), out_(out), platform_(platform) {
    for (std::size_t r = 0; r < placements.size(); ++r) {
      auto m = std::make_unique<Member>(Member{std::move(placements[r]), {}, {}});
      m->scheduler = std::make_unique<BatchScheduler>(static_cast<int>(r), s, kv, out, capacity_blocks, block_bytes);
      m->transfers = std::make_unique<ReplicaTransfers>(s, platform, m->placement);
      members_.push_back(std::move(m));
    }
  }
  [[nodiscard]] int replicas() const override { return static_cast<int>(members_.size()); }
  void enqueue(int member, std::size_t record, int prompt) override {
    members_[member]->scheduler->enqueue(record, prompt);
    sleeper_.wake();
  }
  [[nodiscard]] std::size_t outstanding(int member) const override { return members_[member]->scheduler->outstanding(); }
  [[nodiscard]] std::int64_t used_blocks(int member) const override { return members_[member]->scheduler->used_blocks(); }
  void close() override {
    closed_ = true;
    sleeper_.wake();
  }
  void on_finish(const std::function<void(std::size_t)>& f) override {
    for (auto& m : members_) m->scheduler->on_finish = f;
  }
  [[nodiscard]] double ended_s() const override { return ended_s_; }
  void start(const Platform& platform, int first_replica) override {
    sg4::Actor::create("expert_group" + std::to_string(first_replica), platform.gpus[members_.front()->placement.gpus.front()],
                       [this] { run(); });
  }

 private:
  struct Member {
    Placement placement;
    std::unique_ptr<BatchScheduler> scheduler;
    std::unique_ptr<ReplicaTransfers> transfers;
  };

  void run() {
    const std::size_t n = members_.size();
    for (;;) {
      std::vector<std::optional<ScheduledIteration>> batches(n);
      bool any = false;
      for (std::size_t r = 0; r < n; ++r) {
        batches[r] = members_[r]->scheduler->schedule();
        any = any || batches[r].has_value();
      }
      if (!any) {
        std::size_t left = 0;
        for (const auto& m : members_) left += m->scheduler->outstanding();
        if (closed_ && left == 0) break;
        sleeper_.sleep();
        continue;
      }
      const double began = sg4::Engine::get_clock();
      transfer_before(batches);
      std::vector<IterationLoad> loads(n);
      int group_tokens = 0, busiest = 0;
      for (std::size_t r = 0; r < n; ++r) {
        if (batches[r]) {
          loads[r] = batches[r]->load;
        } else {
          loads[r].prefill_tokens = 1;  // vLLM's dummy batch for an idle data-parallel rank
        }
        const int tokens = loads[r].prefill_tokens + loads[r].decode_sequences;
        group_tokens += tokens;
        busiest = std::max(busiest, tokens);
      }
      double slowest = 0;
      for (std::size_t r = 0; r < n; ++r) {
        loads[r].expert_group_tokens = group_tokens;
        const IterationOpSeconds work = model_.compute_breakdown(loads[r]);
        slowest = std::max(slowest, work.total());
        out_.op_seconds += work;
        if (batches[r]) out_.planned_op_kinds |= plan_.kinds(loads[r]);
      }
      sg4::this_actor::sleep_for(slowest);
      run_collectives_of_group(loads, busiest);
      const double now = sg4::Engine::get_clock();
      for (std::size_t r = 0; r < n; ++r) {
        if (batches[r]) members_[r]->scheduler->complete(*batches[r], began, now);
      }
    }
    ended_s_ = sg4::Engine::get_clock();
    for (auto& m : members_) m->transfers->drain();
  }

  // Every replica's copies at once: each replica that waits for one gets an actor of its own.
  void transfer_before(const std::vector<std::optional<ScheduledIteration>>& batches) {
    std::vector<sg4::ActorPtr> copying;
    for (std::size_t r = 0; r < batches.size(); ++r) {
      if (!batches[r]) continue;
      members_[r]->transfers->start_background(batches[r]->tier);
      if (!ReplicaTransfers::waits_before(*batches[r])) continue;
      const ScheduledIteration* it = &*batches[r];
      ReplicaTransfers* transfers = members_[r]->transfers.get();
      copying.push_back(sg4::Actor::create("expert_group.copy" + std::to_string(r), sg4::this_actor::get_host(),
                                           [transfers, it] { transfers->before(*it); }));
    }
    for (auto& a : copying) a->join();
  }

  void run_collectives_of_group(const std::vector<IterationLoad>& loads, int busiest) const {
    if (model_.tp_all_reduces() > 0) {
      std::vector<CollectivePlan> all_reduces;
      for (std::size_t r = 0; r < members_.size(); ++r) {
        all_reduces.push_back(tensor_parallel_all_reduces(s_, model_, loads[r], members_[r]->placement.stages.front(), 1, platform_));
      }
      run_collectives(all_reduces, platform_);
    }
    if (model_.ep_collectives() == 0) return;
    // One group per tensor rank: that rank of every replica, in replica order.
    const auto tp = members_.front()->placement.gpus.size();
    const double bytes = model_.ep_collective_bytes(busiest);
    for (Collective kind : {Collective::all_gather, Collective::reduce_scatter}) {
      std::vector<CollectivePlan> groups;
      for (std::size_t rank = 0; rank < tp; ++rank) {
        std::vector<int> ring;
        for (const auto& m : members_) ring.push_back(m->placement.gpus[rank]);
        groups.push_back(plan_collective(kind, ring, bytes, platform_.node_of_gpu, s_.cluster, model_.ep_collectives()));
      }
      run_collectives(groups, platform_);
    }
  }

  const Scenario& s_;
  const IterationModel& model_;
  const IterationPlan plan_;
  ServingRun& out_;
  const Platform& platform_;
  std::vector<std::unique_ptr<Member>> members_;
  Sleeper sleeper_;
  bool closed_ = false;
  double ended_s_ = 0;
};

}  // namespace

ServingRun simulate_serving(const Scenario& s) {
  const Inference& inf = *s.inference;
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
    groups.push_back(std::make_unique<ExpertParallelGroup>(s, model, *kv, out, capacity_blocks, memory.block_bytes.as_double(),
                                                           platform, std::move(placements)));
  } else {
    for (int r = 0; r < inf.serving.replicas; ++r) {
      groups.push_back(std::make_unique<Replica>(r, s, model, *kv, out, capacity_blocks, memory.block_bytes.as_double(),
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
  std::size_t round_robin = 0;
  auto route = [&](std::size_t record) {
    std::size_t pick = 0;
    switch (inf.serving.router) {
      case Router::round_robin: pick = round_robin++ % seats.size(); break;
      case Router::least_outstanding:
        for (std::size_t i = 1; i < seats.size(); ++i)
          if (outstanding(i) < outstanding(pick)) pick = i;
        break;
      case Router::least_kv:
        for (std::size_t i = 1; i < seats.size(); ++i)
          if (used_blocks(i) < used_blocks(pick)) pick = i;
        break;
    }
    out.requests[record].replica = static_cast<int>(pick);
    out.requests[record].arrival_s = sg4::Engine::get_clock();
    seats[pick].group->enqueue(seats[pick].member, record, out.requests[record].prompt_tokens);
  };

  const bool closed_loop = inf.workload.arrival == Arrival::closed_loop && inf.workload.trace.empty();
  std::size_t next = 0, finished = 0;
  for (auto& g : groups) {
    g->on_finish([&](std::size_t) {  // a completion or a rejection
      ++finished;
      if (closed_loop && next < out.requests.size()) route(next++);
      if (finished >= out.requests.size()) close_all();
    });
  }
  double router_ended_s = 0;
  sg4::Actor::create("router", platform.cpus[0], [&] {
    if (closed_loop) {
      const std::size_t initial = std::min<std::size_t>(inf.workload.concurrency, out.requests.size());
      while (next < initial) route(next++);
    } else {
      for (; next < out.requests.size(); ++next) {
        const double wait = out.requests[next].arrival_s - sg4::Engine::get_clock();
        if (wait > 0) sg4::this_actor::sleep_for(wait);
        route(next);
      }
      out.last_arrival_s = sg4::Engine::get_clock();
    }
    if (out.requests.empty()) close_all();
    router_ended_s = sg4::Engine::get_clock();
  });
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
