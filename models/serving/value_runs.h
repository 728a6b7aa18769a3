#pragma once
// A long sequence of samples that repeat in runs, stored as (value, count) runs: a serving run's
// inter-token gaps, tens of millions for a million requests, arrive as one equal gap for every
// sequence of an iteration, so a run per iteration holds them exactly in a few bytes each.
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace memtwin {

class ValueRuns {
 public:
  void add(float value) {
    if (!runs_.empty() && runs_.back().first == value && runs_.back().second < std::numeric_limits<std::uint32_t>::max()) {
      ++runs_.back().second;
    } else {
      runs_.emplace_back(value, 1);
    }
    ++count_;
  }
  [[nodiscard]] std::uint64_t size() const { return count_; }
  [[nodiscard]] bool empty() const { return count_ == 0; }
  /// The runs in the order they were added.
  [[nodiscard]] const std::vector<std::pair<float, std::uint32_t>>& runs() const { return runs_; }

 private:
  std::vector<std::pair<float, std::uint32_t>> runs_;
  std::uint64_t count_ = 0;
};

}  // namespace memtwin
