#pragma once
// Keys grouped per channel with a 16-bit residual (KvStorage::channel_key_groups: KIVI) on the
// serving engine (hw/serving_engine.h): every layer's region of the pool laid out as
// kernels/kivi_paged.h says, each layer's append of the new tokens and the decodes' attention.
//
// KIVI sequences shrink when a key group is quantised (G fp16 tokens become one smaller group),
// and the scheduler hands the freed blocks to other sequences before the forward pass runs. So
// before the blocks are synced, `stage` copies out the residual of every sequence this iteration
// will quantise, and the append reads it from there. The staging (at most R + G - 1 tokens' fp16
// K and V per layer, for the sequences quantising this iteration) is the engine's only memory the
// size model does not count; it is an allocation of its own ("kv_cache.kivi_staging").
#include <cstdint>
#include <vector>

#include "hw/block_pool.h"
#include "hw/caching_allocator.h"
#include "hw/serving_kernels.h"
#include "kernels/kivi_paged.h"
#include "models/scenario.h"
#include "models/serving/batch_scheduler.h"

namespace memtwin::hw {

/// The scenario's KIVI cache on one device with `capacity_blocks` blocks; throws Unsupported
/// (models/backend.h) naming the setting to change where the engine cannot lay it out.
kernels::KiviPagedShape channel_key_group_shape(const Scenario& s, std::int64_t capacity_blocks);

class ChannelKeyGroupCache {
 public:
  /// Allocates the pool: `layers` regions of the shape's bytes, exactly capacity x block_bytes.
  ChannelKeyGroupCache(const Scenario& s, std::int64_t capacity_blocks, double block_bytes, ServingKernels& kernels,
                       CachingAllocator& allocator);
  ~ChannelKeyGroupCache();
  ChannelKeyGroupCache(const ChannelKeyGroupCache&) = delete;
  ChannelKeyGroupCache& operator=(const ChannelKeyGroupCache&) = delete;
  [[nodiscard]] std::int64_t pool_bytes() const { return pool_bytes_; }

  /// Before the blocks are synced to the scheduler's counts: stages the residual of every sequence
  /// of `it` whose append quantises a group, from its blocks as they are.
  void stage(const ScheduledIteration& it, const BlockPool& blocks);
  /// After the sync: each sequence's block table, rows, tokens held and new tokens (decodes, then
  /// the prefill chunks, the order of the forward pass's rows).
  void lay_out(const ScheduledIteration& it, const BlockPool& blocks);
  /// One layer: the new tokens' K and V ([rows, kv_heads x head_dim]) into the cache, then, when
  /// the iteration decodes, each decode's query ([decodes, q_heads x head_dim]) against it.
  void append(int layer, const float* k_new, const float* v_new);
  void decode_attention(int layer, const float* query, int q_heads, float* out);
  /// End of the iteration: releases the staging.
  void end();

 private:
  struct Entry {
    const Sequence* sequence;
    std::int32_t cached, added;
  };
  static std::vector<Entry> entries(const ScheduledIteration& it);
  [[nodiscard]] std::uint8_t* layer_region(int layer) const { return pool_ + shape_.bytes() * static_cast<std::size_t>(layer); }

  kernels::KiviPagedShape shape_;
  int layers_ = 0;
  ServingKernels& kernels_;
  CachingAllocator& allocator_;
  std::uint8_t* pool_ = nullptr;
  std::int64_t pool_bytes_ = 0;
  std::uint16_t* staging_ = nullptr;
  std::vector<std::vector<const std::uint16_t*>> staged_;  // [layer][sequence]: its residual, or null
  std::vector<std::int32_t> tables_, first_row_, added_, cached_, context_;
  int max_blocks_ = 1, decodes_ = 0;
};

}  // namespace memtwin::hw
