#include "sim/serving_simulation.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>

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
        platform_(platform), placement_(placement) {}

  void enqueue(std::size_t record, int prompt) {
    scheduler_.enqueue(record, prompt);
    wake();
  }
  [[nodiscard]] std::size_t outstanding() const { return scheduler_.outstanding(); }
  [[nodiscard]] std::int64_t used_blocks() const { return scheduler_.used_blocks(); }
  void close() {
    closed_ = true;
    wake();
  }
  void on_finish(std::function<void(std::size_t)> f) { scheduler_.on_finish = std::move(f); }
  [[nodiscard]] double ended_s() const { return ended_s_; }

  void run() {
    for (;;) {
      auto it = scheduler_.schedule();
      if (!it) {
        if (closed_ && scheduler_.outstanding() == 0) break;
        idle_actor_ = sg4::Actor::self();
        sg4::this_actor::suspend();
        continue;
      }
      const double began = sg4::Engine::get_clock();
      start_background(it->tier);
      transfer_before(*it);
      const IterationOpSeconds work = model_.compute_breakdown(it->load);
      run_stages(it->load, work.total());
      out_.op_seconds += work;
      out_.planned_op_kinds |= plan_.kinds(it->load);
      scheduler_.complete(*it, began, sg4::Engine::get_clock());
    }
    ended_s_ = sg4::Engine::get_clock();
    for (auto& c : background_comms_) c->wait();
    for (auto& io : background_io_) io->wait();
  }

 private:
  // The scheduler counts one GPU's bytes (a replica's block is a block on each of its GPUs): every
  // GPU of the replica moves that much over its own PCIe link, and the node's NVMe serves them all.
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

  // What the iteration waits for: swaps and prefix offloads leaving the GPU, prefix fetches
  // (their NVMe part read first) and swap-ins coming back.
  void transfer_before(const ScheduledIteration& it) {
    std::vector<sg4::CommPtr> comms;
    pcie_async(it.swap_out_bytes + it.tier.gpu_to_host, false, comms);
    if (it.tier.nvme_to_host > 0) {
      sg4::this_actor::sleep_for(s_.cluster.nvme->latency.value());
      platform_.nvme.at(placement_.node)->read(nvme_bytes(it.tier.nvme_to_host));
    }
    pcie_async(it.swap_in_bytes + it.tier.host_to_gpu, true, comms);
    for (auto& c : comms) c->wait();
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

  // Each stage in turn (waiting while another engine's batch holds it): its share of the kernels,
  // then its share of tensor parallelism's all-reduces, then the hidden states to the next stage.
  void run_stages(const IterationLoad& load, double compute_seconds) const {
    const auto stages = static_cast<int>(placement_.stages.size());
    const double tokens = load.prefill_tokens + load.decode_sequences;
    for (int stage = 0; stage < stages; ++stage) {
      if (stages > 1) placement_.stage_locks[stage]->lock();
      sg4::this_actor::sleep_for(compute_seconds / stages);
      tensor_parallel_all_reduces(load, placement_.stages[stage], stages);
      if (stages > 1) placement_.stage_locks[stage]->unlock();
      if (stage + 1 < stages) {
        sg4::Comm::sendto(platform_.gpus[placement_.stages[stage].front()], platform_.gpus[placement_.stages[stage + 1].front()],
                          static_cast<std::uint64_t>(tokens * s_.model.hidden * 2));
      }
    }
  }

  // Two all-reduces of the hidden states per layer of the stage, one after another: run as the
  // flows of one ring carrying all of them, each call priced by the collective model.
  void tensor_parallel_all_reduces(const IterationLoad& load, const std::vector<int>& ring, int stages) const {
    const int count = model_.tp_all_reduces() / stages;
    if (count == 0) return;
    run_collective(plan_collective(Collective::all_reduce, ring, model_.tp_all_reduce_bytes(load), platform_.node_of_gpu,
                                   s_.cluster, count),
                   platform_);
  }

  void wake() {
    if (idle_actor_) {
      auto a = idle_actor_;
      idle_actor_ = nullptr;
      a->resume();
    }
  }
  const Scenario& s_;
  const IterationModel& model_;
  const IterationPlan plan_;  // which ops each iteration runs (the plan hash names them)
  ServingRun& out_;
  BatchScheduler scheduler_;
  const Platform& platform_;
  const Placement& placement_;
  sg4::ActorPtr idle_actor_;
  bool closed_ = false;
  double ended_s_ = 0;
  std::vector<sg4::CommPtr> background_comms_;
  std::vector<sg4::IoPtr> background_io_;
};

// A replica: its virtual engines (one without pipeline stages); a request goes to the one with
// the fewest unfinished requests, as vLLM's engine picks a scheduler.
class Replica {
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
  void enqueue(std::size_t record, int prompt) {
    auto pick = std::min_element(engines_.begin(), engines_.end(),
                                 [](const auto& a, const auto& b) { return a->outstanding() < b->outstanding(); });
    (*pick)->enqueue(record, prompt);
  }
  [[nodiscard]] std::size_t outstanding() const {
    std::size_t n = 0;
    for (const auto& e : engines_) n += e->outstanding();
    return n;
  }
  [[nodiscard]] std::int64_t used_blocks() const {
    std::int64_t n = 0;
    for (const auto& e : engines_) n += e->used_blocks();
    return n;
  }
  void close() {
    for (auto& e : engines_) e->close();
  }
  void on_finish(const std::function<void(std::size_t)>& f) {
    for (auto& e : engines_) e->on_finish(f);
  }
  [[nodiscard]] double ended_s() const {
    double t = 0;
    for (const auto& e : engines_) t = std::max(t, e->ended_s());
    return t;
  }
  void start(const Platform& platform, int index) {
    for (std::size_t e = 0; e < engines_.size(); ++e) {
      sg4::Actor::create("replica" + std::to_string(index) + ".engine" + std::to_string(e),
                         platform.gpus[placement_.gpus.front()], [this, e] { engines_[e]->run(); });
    }
  }

 private:
  Placement placement_;
  std::vector<std::unique_ptr<VirtualEngine>> engines_;
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
  std::vector<std::unique_ptr<Replica>> replicas;
  for (int r = 0; r < inf.serving.replicas; ++r) {
    replicas.push_back(std::make_unique<Replica>(r, s, model, *kv, out, std::max<std::int64_t>(1, memory.capacity_blocks),
                                                 memory.block_bytes.as_double(), platform, placements[r]));
  }
  std::size_t round_robin = 0;
  auto route = [&](std::size_t record) {
    std::size_t pick = 0;
    switch (inf.serving.router) {
      case Router::round_robin: pick = round_robin++ % replicas.size(); break;
      case Router::least_outstanding:
        for (std::size_t i = 1; i < replicas.size(); ++i)
          if (replicas[i]->outstanding() < replicas[pick]->outstanding()) pick = i;
        break;
      case Router::least_kv:
        for (std::size_t i = 1; i < replicas.size(); ++i)
          if (replicas[i]->used_blocks() < replicas[pick]->used_blocks()) pick = i;
        break;
    }
    out.requests[record].replica = static_cast<int>(pick);
    out.requests[record].arrival_s = sg4::Engine::get_clock();
    replicas[pick]->enqueue(record, out.requests[record].prompt_tokens);
  };

  const bool closed_loop = inf.workload.arrival == Arrival::closed_loop && inf.workload.trace.empty();
  std::size_t next = 0, finished = 0;
  for (auto& r : replicas) {
    r->on_finish([&](std::size_t) {  // a completion or a rejection
      ++finished;
      if (closed_loop && next < out.requests.size()) route(next++);
      if (finished >= out.requests.size()) {
        for (auto& other : replicas) other->close();
      }
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
    if (out.requests.empty()) for (auto& other : replicas) other->close();
    router_ended_s = sg4::Engine::get_clock();
  });
  for (std::size_t r = 0; r < replicas.size(); ++r) replicas[r]->start(platform, static_cast<int>(r));
  engine->run();
  // The run ends with its last iteration (background copies still draining do not count).
  out.makespan_s = router_ended_s;
  for (const auto& r : replicas) out.makespan_s = std::max(out.makespan_s, r->ended_s());
  if (closed_loop) out.last_arrival_s = out.makespan_s;
  return out;
}

}  // namespace memtwin::sim
