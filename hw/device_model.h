#pragma once
// The serving engine's model on a device (hw/serving_engine.h): the scenario's weights (fp32,
// synthetic values, the GEMMs of models/serving/serving_gemms.h laid out in one allocation the
// size the memory model counts), its paged KV cache in the compressor's format, and one
// iteration's forward pass on the device's kernels. Under expert parallelism (a ServingGroup) the
// model holds its rank's share of every MoE layer's experts and exchanges each MoE layer's tokens
// with the group's other ranks.
//
// With a real model's weights (hw/real_weights.h) instead, the same pass embeds each sequence's
// tokens, applies the learned norms and the model's rotary base, computes each prompt's causal
// attention on its fresh K and V (a prompt is prefilled in one chunk; its cache is written in the
// method's format as always, and decodes read it from there), and hands every output row's logits
// back through the TokenStream.
//
// Contract: one forward (or idle_forward) per iteration, after before_sync and the block pool's
// sync; in a group every rank runs one of them per lockstep iteration, with the same `group_rows`.
#include <cstdint>
#include <memory>
#include <vector>

#include "hw/block_pool.h"
#include "hw/caching_allocator.h"
#include "hw/real_weights.h"
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
  /// `real`: a real model's weights, of the scenario's model's shape (dense, gated MLP, one rank),
  /// copied to the device; null for synthetic ones. Throws Unsupported where the shapes differ.
  DeviceModel(const Scenario& s, const KvCompressor& kv, CachingAllocator& allocator, ServingKernels& kernels,
              std::int64_t capacity_blocks, std::int64_t weight_bytes, double block_bytes, ServingGroup* group = nullptr,
              const RealWeights* real = nullptr);
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
  /// `tokens`: with real weights, the sequences' tokens and where their logits go (required).
  void forward(const ScheduledIteration& it, const BlockPool& blocks, const LayerBlockPool* per_layer,
               const std::vector<int>& group_rows = {}, TokenStream* tokens = nullptr);
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
  void load_real(const RealWeights& real);
  /// The real model's embedding rows of the iteration's tokens (decodes, then the chunks).
  void embed(const ScheduledIteration& it, TokenStream& tokens, float* residual);
  /// Each prompt's attention for real (the iteration's rows in `inter`; decodes come first).
  void prompt_attention(const ScheduledIteration& it, float* inter);
  /// The output rows' logits (decodes', then each completing prompt's last), to `tokens`.
  void real_logits(const ScheduledIteration& it, const float* residual, float* gathered, float* normed, float* logits,
                   TokenStream& tokens);
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
  // A real model's: its embedding table, norms (two per layer, then the final one) and constants.
  const RealWeights* real_ = nullptr;
  float* embeddings_ = nullptr;
  float* norms_ = nullptr;
  std::vector<float> host_logits_;
};

}  // namespace memtwin::hw
