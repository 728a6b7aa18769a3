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

#include "models/kv/kv_compressor.h"
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

/// Blocks per layer, for methods whose layers keep different numbers of tokens (per-layer budgets): every
/// block the scheduler counts is one block in each layer's region of the pool, and those layer
/// blocks are handed to whichever (sequence, layer) needs them, so a deep layer's spare blocks hold
/// a shallow layer's extra tokens. Ids are global: layer region r, block b is r x blocks + b. The
/// scheduler's count rounds each layer's tokens up to whole blocks (KvShape::block_size), so the
/// layer blocks in use never exceed the blocks it counts times the layers.
class LayerBlockPool {
 public:
  LayerBlockPool(std::int64_t blocks, int layers, const KvCompressor& kv, int block_size)
      : layers_(layers), block_size_(block_size), kv_(kv) {
    for (std::int64_t id = blocks * layers - 1; id >= 0; --id) free_.push_back(static_cast<std::int32_t>(id));
  }
  /// Every running sequence's layers hold the blocks their tokens need: the whole prompt while it
  /// is prefilled (or selection has not run yet), then each layer's kept tokens and the next token.
  void sync(const std::deque<Sequence>& running) {
    std::unordered_map<std::size_t, const Sequence*> live;
    for (const auto& q : running) live[q.record] = &q;
    for (auto it = owned_.begin(); it != owned_.end();) {
      if (live.count(it->first)) {
        ++it;
        continue;
      }
      for (auto& layer : it->second) free_.insert(free_.end(), layer.begin(), layer.end());
      it = owned_.erase(it);
    }
    for (const auto& [record, q] : live) {
      auto& layers = owned_[record];
      layers.resize(static_cast<std::size_t>(layers_));
      for (int l = 0; l < layers_; ++l) {
        auto& blocks = layers[static_cast<std::size_t>(l)];
        const std::int64_t want = target(*q, l);
        while (static_cast<std::int64_t>(blocks.size()) > want) free_.push_back(blocks.back()), blocks.pop_back();
      }
    }
    for (const auto& [record, q] : live) {
      auto& layers = owned_[record];
      for (int l = 0; l < layers_; ++l) {
        auto& blocks = layers[static_cast<std::size_t>(l)];
        while (static_cast<std::int64_t>(blocks.size()) < target(*q, l)) {
          if (free_.empty()) throw std::logic_error("KV layer blocks exhausted: the scheduler and the pool disagree");
          blocks.push_back(free_.back());
          free_.pop_back();
        }
      }
    }
  }
  [[nodiscard]] const std::vector<std::int32_t>& table(const Sequence& q, int layer) const {
    return owned_.at(q.record).at(static_cast<std::size_t>(layer));
  }

 private:
  [[nodiscard]] std::int64_t target(const Sequence& q, int layer) const {
    if (q.prefilled < q.prompt || q.generated == 0) return q.blocks;
    return (kv_.kept_tokens_in_layer(q.prompt, q.generated + 1, layer) + block_size_ - 1) / block_size_;
  }

  int layers_, block_size_;
  const KvCompressor& kv_;
  std::vector<std::int32_t> free_;
  std::unordered_map<std::size_t, std::vector<std::vector<std::int32_t>>> owned_;  // by request record, then layer
};

}  // namespace memtwin::hw
