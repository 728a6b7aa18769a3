#include <algorithm>
#include <optional>
#include <string>

#include "models/serving/iteration_plan.h"
#include "sim/serving_replicas.h"

namespace memtwin::sim {
namespace {

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
  void on_prefill_start(const std::function<void(std::size_t)>& f) override {
    for (auto& m : members_) m->scheduler->on_prefill_start = f;
  }
  void on_finish(const std::function<void(std::size_t)>& f) override {
    for (auto& m : members_) m->scheduler->on_finish = f;
  }
  [[nodiscard]] double ended_s() const override { return ended_s_; }
  std::vector<sg4::ActorPtr> start(const Platform& platform, int first_replica) override {
    return {sg4::Actor::create("expert_group" + std::to_string(first_replica), platform.gpus[members_.front()->placement.gpus.front()],
                       [this] { run(); })};
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
      double slowest = 0, busy = 0;
      for (std::size_t r = 0; r < n; ++r) {
        loads[r].expert_group_tokens = group_tokens;
        const IterationOpSeconds work = model_.compute_breakdown(loads[r]);
        slowest = std::max(slowest, work.total());
        busy += work.total();
        out_.op_seconds += work;
        if (batches[r]) out_.planned_op_kinds |= plan_.kinds(loads[r]);
      }
      sg4::this_actor::sleep_for(slowest);
      const double exchanging = sg4::Engine::get_clock();
      run_collectives_of_group(loads, busiest);
      // Every replica's GPUs wait for the slowest replica's kernels, then exchange.
      out_.op_seconds[IterationOp::collective] +=
          (slowest * static_cast<double>(n) - busy) + static_cast<double>(n) * (sg4::Engine::get_clock() - exchanging);
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

std::unique_ptr<ReplicaGroup> make_expert_parallel_group(const Scenario& s, const IterationModel& model, const KvCompressor& kv,
                                                         ServingRun& out, std::int64_t capacity_blocks, double block_bytes,
                                                         const Platform& platform, std::vector<Placement> placements) {
  return std::make_unique<ExpertParallelGroup>(s, model, kv, out, capacity_blocks, block_bytes, platform, std::move(placements));
}

}  // namespace memtwin::sim
