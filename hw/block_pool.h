#pragma once
// The physical KV blocks of the serving engine's pool (hw/serving_engine.h), handed to sequences
// and to cached shared prefixes as the scheduler (models/serving/batch_scheduler.h) grows, shares
// and evicts them: the scheduler counts blocks, this pool names them.
#include <cstdint>
#include <deque>
#include <iterator>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "models/serving/batch_scheduler.h"
#include "models/serving/serving_run.h"

namespace memtwin::hw {

class BlockPool {
 public:
  BlockPool(std::int64_t blocks, const ServingRun& run) : run_(run) {
    for (std::int64_t b = blocks - 1; b >= 0; --b) free_.push_back(static_cast<std::int32_t>(b));
  }
  /// Makes every running sequence own exactly the blocks the scheduler counts as its own, and every
  /// cached prefix hold its blocks; releases those of sequences that left (finished, preempted or
  /// swapped out) and of prefixes evicted from the GPU.
  void sync(const std::deque<Sequence>& running, const std::map<int, std::int64_t>& prefixes) {
    std::unordered_map<std::size_t, std::int64_t> want;
    for (const auto& q : running) want[q.record] = q.blocks;
    shrink(owned_, [&](std::size_t record) {
      auto w = want.find(record);
      return w == want.end() ? 0 : w->second;
    });
    shrink(prefix_, [&](int group) {
      auto w = prefixes.find(group);
      return w == prefixes.end() ? 0 : w->second;
    });
    for (const auto& [group, blocks] : prefixes) grow(prefix_[group], blocks);
    for (const auto& [record, blocks] : want) grow(owned_[record], blocks);
  }
  /// The sequence's logical blocks: its share of its group's cached prefix, then its own.
  [[nodiscard]] std::vector<std::int32_t> table(const Sequence& q) const {
    std::vector<std::int32_t> t;
    if (q.shared > 0) {
      const auto& prefix = prefix_.at(run_.requests[q.record].prefix_group);
      t.assign(prefix.begin(), prefix.begin() + q.shared);
    }
    const auto own = owned_.find(q.record);
    if (own != owned_.end()) t.insert(t.end(), own->second.begin(), own->second.end());
    return t;
  }

 private:
  template <class Map, class Want>
  void shrink(Map& holders, Want want) {
    for (auto it = holders.begin(); it != holders.end();) {
      const std::int64_t keep = want(it->first);
      while (static_cast<std::int64_t>(it->second.size()) > keep) {
        free_.push_back(it->second.back());
        it->second.pop_back();
      }
      it = it->second.empty() ? holders.erase(it) : std::next(it);
    }
  }
  void grow(std::vector<std::int32_t>& blocks, std::int64_t total) {
    while (static_cast<std::int64_t>(blocks.size()) < total) {
      if (free_.empty()) throw std::logic_error("KV block pool exhausted: the scheduler and the pool disagree");
      blocks.push_back(free_.back());
      free_.pop_back();
    }
  }

  const ServingRun& run_;
  std::vector<std::int32_t> free_;
  std::unordered_map<std::size_t, std::vector<std::int32_t>> owned_;  // by request record
  std::map<int, std::vector<std::int32_t>> prefix_;                   // by prefix group
};

}  // namespace memtwin::hw
