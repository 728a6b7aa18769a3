#pragma once
// The serving engine's model on a device (hw/serving_engine.h): the scenario's weights (fp32,
// synthetic values, the GEMMs of models/serving/serving_gemms.h laid out in one allocation the
// size the memory model counts), its paged KV cache in the compressor's format, and one
// iteration's forward pass on the device's kernels. Under expert parallelism (a ServingGroup) the
// model holds its rank's share of every MoE layer's experts and exchanges each MoE layer's tokens
// with the group's other ranks.
//
// Contract: one forward (or idle_forward) per iteration, after before_sync and the block pool's
// sync; in a group every rank runs one of them per lockstep iteration, with the same `group_rows`.
#include <cstdint>
#include <memory>
#include <vector>

#include "hw/block_pool.h"
#include "hw/caching_allocator.h"
#include "hw/serving_group.h"
#include "hw/serving_kernels.h"
#include "kernels/kv_kernels.h"
#include "models/kv/kv_compressor.h"
#include "models/scenario.h"
#include "models/serving/batch_scheduler.h"
#include "models/serving/serving_gemms.h"

namespace memtwin::hw {

class KvEviction;
class ChannelKeyGroupCache;

/// The cache format the engine's KV kernels run this scenario's compression in; throws
/// Unsupported for what they cannot lay out or a method that is simulated only.
kernels::KvFormat kv_format(const Scenario& s);

/// Tokens an iteration computes: one per decoding sequence, each prefill chunk's.
int iteration_tokens(const ScheduledIteration& it);

class DeviceModel {
 public:
  /// `group`: the expert-parallel group this rank belongs to (it must outlive the model), or null.
  DeviceModel(const Scenario& s, const KvCompressor& kv, CachingAllocator& allocator, ServingKernels& kernels,
              std::int64_t capacity_blocks, std::int64_t weight_bytes, double block_bytes, ServingGroup* group = nullptr);
  ~DeviceModel();
  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;
  /// K and V, and the scores of a method that keeps them (hw/kv/kv_eviction.h).
  [[nodiscard]] std::int64_t pool_bytes() const;
  /// Channel-key groups: before the blocks are synced, the residuals this iteration quantises
  /// (hw/kv/channel_key_group_cache.h).
  void before_sync(const ScheduledIteration& it, const BlockPool& blocks);

  /// One iteration; `per_layer` holds the blocks of methods whose layers keep different numbers
  /// of tokens (each layer's table of global layer-block ids), else every layer uses `blocks`.
  /// `group_rows`: in a group, every rank's tokens this iteration (this rank's iteration_tokens).
  void forward(const ScheduledIteration& it, const BlockPool& blocks, const LayerBlockPool* per_layer,
               const std::vector<int>& group_rows = {});
  /// A group's rank without a batch: vLLM's dummy batch of one token, which takes part in every
  /// MoE layer's exchange (its `group_rows` entry is 1) and computes the rank's experts for the
  /// others' tokens.
  void idle_forward(const std::vector<int>& group_rows);

 private:
  float* tensor(std::int64_t bytes, const char* what) { return static_cast<float*>(allocator_.allocate(bytes, what)); }
  struct Layer {
    float* matrix[static_cast<int>(ServingGemm::Role::count)] = {};  // by ServingGemm::Role (a MoE layer's experts in a row)
    [[nodiscard]] const float* router() const { return matrix[static_cast<int>(ServingGemm::Role::router)]; }
    [[nodiscard]] const float* qkv() const { return matrix[static_cast<int>(ServingGemm::Role::qkv)]; }
    [[nodiscard]] const float* o() const { return matrix[static_cast<int>(ServingGemm::Role::attention_out)]; }
    [[nodiscard]] const float* up() const { return matrix[static_cast<int>(ServingGemm::Role::gate_up)]; }
    [[nodiscard]] const float* down() const { return matrix[static_cast<int>(ServingGemm::Role::down)]; }
  };
  void experts(const Layer& w, const float* normed, float* residual, int tokens, const std::vector<int>& group_rows);
  void lay_out(const ScheduledIteration& it, const BlockPool& blocks, const LayerBlockPool* per_layer, int layer);

  const ModelSpec& m_;
  CachingAllocator& allocator_;
  ServingKernels& kernels_;
  ServingGroup* group_ = nullptr;
  int q_ = 0, kv_ = 0, up_ = 0, width_ = 0;
  int local_experts_ = 0;  // experts held here: all of them, or a group rank's share
  float* weights_ = nullptr;
  float* lm_head_ = nullptr;
  std::vector<Layer> layers_;
  kernels::PagedShape shape_;
  std::uint8_t* pool_ = nullptr;
  std::int64_t pool_bytes_ = 0;
  std::vector<std::int64_t> slots_;
  std::vector<std::int32_t> positions_;
  std::vector<std::int32_t> tables_, context_;
  std::vector<std::vector<std::int32_t>> decode_tables_, prefill_tables_;
  int max_blocks_ = 1;
  kernels::PagedShape global_shape_;  // every layer's region as one pool of layer blocks
  std::unique_ptr<KvEviction> eviction_;  // where tokens live; the scores of the methods that keep them
  std::unique_ptr<ChannelKeyGroupCache> grouped_keys_;  // the pool and kernels of channel-key groups, instead of pool_
  std::vector<int> sampled_;
};

}  // namespace memtwin::hw
