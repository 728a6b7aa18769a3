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
#include "models/serving/request_stream.h"
#include "sim/engine_setup.h"

namespace memtwin::sim {

namespace sg4 = simgrid::s4u;

namespace {

// One replica as an actor: the shared scheduler decides, SimGrid's clock advances by the
// iteration's roofline time and its swap transfers.
class Replica {
 public:
  Replica(int index, const Scenario& s, const IterationModel& model, const KvCompressor& kv, ServingRun& out,
          std::int64_t capacity_blocks, double block_bytes)
      : s_(s), model_(model), scheduler_(index, s, kv, out, capacity_blocks, block_bytes) {}

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

  void run() {
    const double pcie = s_.cluster.host.pcie_bandwidth.value();
    for (;;) {
      auto it = scheduler_.schedule();
      if (!it) {
        if (closed_ && scheduler_.outstanding() == 0) return;
        idle_actor_ = sg4::Actor::self();
        sg4::this_actor::suspend();
        continue;
      }
      const double began = sg4::Engine::get_clock();
      sg4::this_actor::sleep_for(model_.seconds(it->load) + (it->swap_out_bytes + it->swap_in_bytes) / pcie +
                                 it->tier_seconds);
      scheduler_.complete(*it, began, sg4::Engine::get_clock());
    }
  }

 private:
  void wake() {
    if (idle_actor_) {
      auto a = idle_actor_;
      idle_actor_ = nullptr;
      a->resume();
    }
  }
  const Scenario& s_;
  const IterationModel& model_;
  BatchScheduler scheduler_;
  sg4::ActorPtr idle_actor_;
  bool closed_ = false;
};

}  // namespace

ServingRun simulate_serving(const Scenario& s) {
  const Inference& inf = *s.inference;
  const ServingMemory memory = serving_memory(s);
  ServingRun out = start_serving_run(generate_requests(inf, s.seed));
  out.capacity_blocks = memory.capacity_blocks;
  auto engine = make_engine();
  auto* zone = sg4::create_full_zone("serving");
  std::vector<sg4::Host*> hosts;
  for (int r = 0; r < inf.serving.replicas; ++r) hosts.push_back(zone->create_host("replica" + std::to_string(r), 1e9));
  zone->seal();

  const IterationModel model(s);
  const KvShape shape = serving_kv_shape(s);
  auto kv = make_kv_compressor(inf.kv_cache.compression, shape);
  std::vector<std::unique_ptr<Replica>> replicas;
  for (int r = 0; r < inf.serving.replicas; ++r) {
    replicas.push_back(std::make_unique<Replica>(r, s, model, *kv, out, std::max<std::int64_t>(1, memory.capacity_blocks),
                                                 memory.block_bytes.as_double()));
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
  sg4::Actor::create("router", hosts[0], [&] {
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
  });
  for (std::size_t r = 0; r < replicas.size(); ++r) {
    sg4::Actor::create("replica" + std::to_string(r), hosts[r], [&, r] { replicas[r]->run(); });
  }
  engine->run();
  out.makespan_s = sg4::Engine::get_clock();
  if (closed_loop) out.last_arrival_s = out.makespan_s;
  return out;
}

}  // namespace memtwin::sim
