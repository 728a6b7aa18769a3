#pragma once
// An expert-parallel group's exchanges observed as the serving kernels are (hw/timed_serving_kernels.h):
// each MoE layer's all-gather and reduce-scatter is recorded by its signature
// (models/serving/iteration_plan.h: "collective all_gather expert_parallel") and timed into the
// run's `collective` work, the wait for the group's slowest rank included, as the simulator
// prices it. The state the ranks share between iterations (all_gather, gather_to_first) is the
// engine's coordination, not an iteration's work, and is forwarded untimed.
#include <chrono>
#include <set>
#include <string>

#include "hw/serving_group.h"
#include "models/serving/iteration_plan.h"

namespace memtwin::hw {

class TimedServingGroup final : public ServingGroup {
 public:
  TimedServingGroup(ServingGroup& group, IterationOpSeconds& into, std::set<std::string>& ops)
      : group_(group), into_(into), ops_(ops) {}
  /// Seconds in the timed exchanges so far.
  [[nodiscard]] double seconds() const { return seconds_; }

  [[nodiscard]] int rank() const override { return group_.rank(); }
  [[nodiscard]] int ranks() const override { return group_.ranks(); }
  std::vector<std::int64_t> all_gather(const std::vector<std::int64_t>& mine) override { return group_.all_gather(mine); }
  void all_gather_rows(const float* mine, float* all, const std::vector<int>& rows, int width) override {
    timed("all_gather", [&] { group_.all_gather_rows(mine, all, rows, width); });
  }
  void reduce_scatter_add(const float* all, float* mine, const std::vector<int>& rows, int width) override {
    timed("reduce_scatter", [&] { group_.reduce_scatter_add(all, mine, rows, width); });
  }
  std::vector<std::string> gather_to_first(const std::string& text) override { return group_.gather_to_first(text); }

 private:
  template <typename F>
  void timed(const char* kind, F&& call) {
    ops_.insert(collective_signature(kind, "expert_parallel"));
    const auto began = std::chrono::steady_clock::now();
    call();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    into_[IterationOp::collective] += s;
    seconds_ += s;
  }
  ServingGroup& group_;
  IterationOpSeconds& into_;
  std::set<std::string>& ops_;
  double seconds_ = 0;
};

}  // namespace memtwin::hw
