#pragma once
// Where the serving engine (hw/serving_engine.h) keeps each sequence's tokens in its paged cache
// under the scenario's KV method, and the work score-based eviction adds to each layer.
//
// Without eviction a token's logical slot is its position. StreamingLLM keeps the first `sinks`
// tokens and a ring of the last `window`. The score-based methods cache the whole prompt while it
// is prefilled, then per KV head keep the best-scored tokens, compacted to the front of the
// sequence's blocks (kernels/eviction.h), before the scheduler takes the freed blocks back:
//  * SnapKV: the last `window` prompt queries vote for the tokens (probabilities summed over the
//    window and the GQA group, max-pooled over `pooling_kernel` neighbours; the last prefill
//    chunk's queries, when it is shorter than the window); the window and the top of the rest up
//    to `budget` are kept; generated tokens follow them.
//  * PyramidKV: the same with a budget per layer, falling with depth; each layer has its own block
//    table (hw/block_pool.h: LayerBlockPool).
//  * H2O: every query's probabilities accumulate into fp32 scores per (token, KV head) beside the
//    cache: the prompt's queries (a QK^T pass more: flash-style prefill attention does not return
//    probabilities) and each decode step's. After the prompt the heavy hitters sit in [0, H) and
//    the recent window as a ring in [H, H + R); each decode step, per KV head, the token leaving
//    the ring replaces the lowest-scored heavy hitter if it scored higher, and the new token takes
//    its slot. H + R is the compressor's budget, R = ceil(recent_ratio x prompt) (at least 1).
// Every count (tokens kept, budgets) is the scheduler's compressor's (models/kv), so the engine
// holds exactly the blocks the simulator counts, scores included.
#include <cstdint>
#include <vector>

#include "hw/caching_allocator.h"
#include "hw/serving_kernels.h"
#include "models/kv/kv_method.h"
#include "models/scenario.h"
#include "models/serving/batch_scheduler.h"

namespace memtwin::hw {

class KvEviction {
 public:
  /// Allocates H2O's scores for `layers` layers of the pool `shape` describes.
  KvEviction(const Scenario& s, const KvCompressor& kv, const kernels::PagedShape& shape, ServingKernels& kernels,
             CachingAllocator& allocator);
  ~KvEviction();
  KvEviction(const KvEviction&) = delete;
  KvEviction& operator=(const KvEviction&) = delete;

  /// The logical cache slot of the sequence's token at `position` in `layer`.
  [[nodiscard]] int index(const Sequence& q, int position, int layer) const;
  /// Tokens decode attention reads in `layer` once this step's token is written.
  [[nodiscard]] int cached(const Sequence& q, int layer) const {
    return static_cast<int>(kv_.kept_tokens_in_layer(q.prompt, q.generated, layer));
  }
  [[nodiscard]] std::int64_t score_bytes() const { return score_bytes_; }

  /// One layer's caches and the iteration's metadata, as the engine built them for its kernels.
  struct Step {
    int layer = 0;
    std::uint8_t *k_cache = nullptr, *v_cache = nullptr;
    const kernels::PagedShape* shape = nullptr;  ///< the caches' geometry (block ids as the tables give them)
    const ScheduledIteration* it = nullptr;
    const std::vector<std::int32_t>* decode_tables = nullptr;  ///< [decodes, max_blocks]
    int max_blocks = 0;
    const std::vector<std::int32_t>* decode_context = nullptr;
    const std::vector<std::vector<std::int32_t>>* prefill_tables = nullptr;  ///< one per prefilling sequence
    const std::vector<std::int64_t>* slots = nullptr;  ///< every new token's slot (write_paged's mapping)
    const float* rows = nullptr;  ///< the iteration's intermediate rows (decodes, then the chunks), queries at [0, q_heads * head_dim)
    int row_stride = 0;
  };
  /// Start of an iteration: decode attention's probabilities buffer when H2O scores decodes.
  void begin(const ScheduledIteration& it, int max_blocks);
  /// decode attention's DecodeAttentionArgs::probs (null when not scoring) and its stride.
  [[nodiscard]] float* decode_probs() const { return decode_probs_; }
  [[nodiscard]] int decode_probs_stride() const { return decode_stride_; }
  /// Before the layer's new K and V are written: H2O's leaving tokens and the new slots' scores.
  void before_write(const Step& step);
  /// After decode attention: H2O adds the decodes' probabilities; then the prompt queries' scores
  /// and, for prompts finishing in this iteration, selection and compaction.
  void after_attention(const Step& step);
  void end();

 private:
  struct Budget {
    int keep = 0, recent = 0;  // tokens kept after the prompt, of which the most recent
  };
  [[nodiscard]] Budget budget(const Sequence& q, int layer) const;
  [[nodiscard]] kernels::PagedScores layer_scores(int layer) const;
  const Scenario& s_;
  const KvCompressor& kv_;
  kernels::PagedShape shape_;
  ServingKernels& kernels_;
  CachingAllocator& allocator_;
  KvSelection selection_;  // which tokens the scenario's method keeps
  int q_heads_ = 0;
  float* scores_ = nullptr;  // H2O: [layers][num_blocks, block_size, kv_heads]
  std::int64_t score_bytes_ = 0;
  float* decode_probs_ = nullptr;
  int decode_stride_ = 0;
};

}  // namespace memtwin::hw
