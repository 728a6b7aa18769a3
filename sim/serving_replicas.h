#pragma once
// The serving simulation's engines, as SimGrid actors: a replica on its own (its virtual engines,
// one per pipeline stage) or the replicas of an expert-parallel group stepping together; and what
// both use, a replica's tier copies and tensor parallelism's all-reduces. simulate_serving
// (sim/serving_simulation.h) places them, routes requests to them and runs them.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <simgrid/s4u.hpp>

#include "models/kv/kv_compressor.h"
#include "models/scenario.h"
#include "models/serving/batch_scheduler.h"
#include "models/serving/iteration_cost.h"
#include "models/serving/serving_run.h"
#include "sim/collectives.h"
#include "sim/platform.h"

namespace memtwin::sim {

namespace sg4 = simgrid::s4u;

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
                                           const std::vector<int>& ring, int stages, const Platform& platform);

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
  /// Each request whose prefill starts (BatchScheduler::on_prefill_start).
  virtual void on_prefill_start(const std::function<void(std::size_t)>& f) = 0;
  [[nodiscard]] virtual double ended_s() const = 0;
  /// Creates its actors now (they end once closed and drained), and returns them.
  virtual std::vector<sg4::ActorPtr> start(const Platform& platform, int first_replica) = 0;
};

/// The router actor, on the first CPU: releases the run's requests to `route` at their arrival
/// times, counted from the moment it starts (a closed loop: its first `concurrency` at once, the
/// others as `route`'s caller issues them on completions), `next` being the next to release; with
/// no requests it closes everything at once (`close_all`). `ended_s` is when it let go of the last.
sg4::ActorPtr start_router(const Platform& platform, const Inference& inf, ServingRun& out, std::size_t& next,
                  std::function<void(std::size_t)> route, std::function<void()> close_all, double& ended_s);

/// The end of a run that began at `began_s` (the router's start): it lasts until its router let go
/// of the last request or its last engine's last iteration ended, whichever is later (background
/// copies still draining do not count); a closed loop's last arrival is its end; its times are
/// then counted from `began_s`.
void end_serving_run(ServingRun& out, double began_s, double router_ended_s, const std::vector<const ReplicaGroup*>& engines,
                     bool closed_loop);

/// A replica on its own, replica `index` of the run.
std::unique_ptr<ReplicaGroup> make_replica(int index, const Scenario& s, const IterationModel& model, const KvCompressor& kv,
                                           ServingRun& out, std::int64_t capacity_blocks, double block_bytes,
                                           const Platform& platform, Placement placement);

/// The replicas of one expert-parallel group (inference.serving.expert_parallel), in replica order.
std::unique_ptr<ReplicaGroup> make_expert_parallel_group(const Scenario& s, const IterationModel& model, const KvCompressor& kv,
                                                         ServingRun& out, std::int64_t capacity_blocks, double block_bytes,
                                                         const Platform& platform, std::vector<Placement> placements);

}  // namespace memtwin::sim
