#include "hw/kv/kv_eviction.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace memtwin::hw {

KvEviction::KvEviction(const Scenario& s, const KvCompressor& kv, const kernels::PagedShape& shape, ServingKernels& kernels,
                       CachingAllocator& allocator)
    : s_(s), kv_(kv), shape_(shape), kernels_(kernels), allocator_(allocator),
      selection_(kv_method(s.inference->kv_cache.compression.method).selection), q_heads_(s.model.heads) {
  if (selection_ != KvSelection::accumulated_scores) return;
  // One fp32 score per cached (token, KV head) and layer: the bytes H2O's size model adds per token.
  const std::int64_t floats = static_cast<std::int64_t>(shape_.num_blocks) * shape_.block_size * shape_.kv_heads * s.model.layers;
  score_bytes_ = 4 * floats;
  scores_ = static_cast<float*>(allocator_.allocate(score_bytes_, "kv_cache.scores"));
  kernels_.fill(scores_, floats, 0.0f);
}

KvEviction::~KvEviction() {
  end();
  if (scores_) allocator_.release(scores_);
}

KvEviction::Budget KvEviction::budget(const Sequence& q, int layer) const {
  Budget b;
  b.keep = static_cast<int>(kv_.kept_tokens_in_layer(q.prompt, 0, layer));
  const CompressionSpec& c = s_.inference->kv_cache.compression;
  if (selection_ == KvSelection::accumulated_scores) {
    b.recent = std::clamp(static_cast<int>(std::ceil(c.recent_ratio * q.prompt)), 1, b.keep);
  } else {
    b.recent = std::min(c.window, b.keep);
  }
  return b;
}

int KvEviction::index(const Sequence& q, int position, int layer) const {
  const CompressionSpec& c = s_.inference->kv_cache.compression;
  switch (selection_) {
    case KvSelection::sinks_and_window:
      return position < c.sinks ? position : c.sinks + (position - c.sinks) % c.window;
    case KvSelection::prompt_vote:
      return position < q.prompt ? position : budget(q, layer).keep + (position - q.prompt);
    case KvSelection::accumulated_scores: {
      if (position < q.prompt) return position;
      const Budget b = budget(q, layer);
      return b.keep - b.recent + (position - q.prompt) % b.recent;
    }
    case KvSelection::all: break;
  }
  return position;
}

kernels::PagedScores KvEviction::layer_scores(int layer) const {
  kernels::PagedScores p;
  p.data = scores_ + static_cast<std::int64_t>(layer) * shape_.num_blocks * shape_.block_size * shape_.kv_heads;
  p.block_size = shape_.block_size;
  p.kv_heads = shape_.kv_heads;
  return p;
}

void KvEviction::begin(const ScheduledIteration& it, int max_blocks) {
  end();
  if (selection_ != KvSelection::accumulated_scores || it.decoding.empty()) return;
  decode_stride_ = max_blocks * shape_.block_size;
  decode_probs_ = static_cast<float*>(allocator_.allocate(
      4LL * static_cast<std::int64_t>(it.decoding.size()) * q_heads_ * decode_stride_, "activations.attention_probs"));
}

void KvEviction::end() {
  if (decode_probs_) allocator_.release(decode_probs_);
  decode_probs_ = nullptr;
  decode_stride_ = 0;
}

void KvEviction::before_write(const Step& step) {
  if (selection_ != KvSelection::accumulated_scores) return;
  const kernels::PagedScores scores = layer_scores(step.layer);
  const auto& decoding = step.it->decoding;
  std::vector<std::int32_t> heavy(decoding.size()), leaving(decoding.size());
  for (std::size_t i = 0; i < decoding.size(); ++i) {
    const Sequence& q = *decoding[i];
    const Budget b = budget(q, step.layer);
    heavy[i] = b.keep - b.recent;
    leaving[i] = index(q, q.prompt + q.generated - 1, step.layer);
  }
  if (!decoding.empty()) {
    kernels_.promote_leaving_tokens(step.k_cache, step.v_cache, *step.shape, scores,
                                    kernels::LeavingTokens{step.decode_tables->data(), step.max_blocks, heavy.data(), leaving.data(),
                                                           static_cast<int>(decoding.size())});
  }
  kernels_.clear_scores(scores, step.slots->data(), static_cast<int>(step.slots->size()));
}

void KvEviction::after_attention(const Step& step) {
  if (selection_ != KvSelection::accumulated_scores && selection_ != KvSelection::prompt_vote) return;
  const ScheduledIteration& it = *step.it;
  const int decodes = static_cast<int>(it.decoding.size());
  if (selection_ == KvSelection::accumulated_scores && decodes > 0) {
    kernels_.accumulate_scores(decode_probs_, decodes, q_heads_, decode_stride_, step.decode_tables->data(), step.max_blocks,
                               step.decode_context->data(), layer_scores(step.layer));
  }
  int row = decodes;
  for (std::size_t i = 0; i < it.prefilling.size(); ++i) {
    const Sequence& q = *it.prefilling[i];
    const int chunk = it.chunks[i];
    const auto& table = (*step.prefill_tables)[i];
    const bool completes = q.prefilled + chunk >= q.prompt;
    kernels::PromptSelection selection;
    selection.block_table = table.data();
    selection.tokens = q.prompt;
    const Budget b = budget(q, step.layer);
    selection.keep = b.keep;
    selection.recent = b.recent;
    if (selection_ == KvSelection::accumulated_scores) {
      kernels_.score_prompt(step.rows + static_cast<std::int64_t>(row) * step.row_stride, step.row_stride, chunk, q.prefilled,
                            q_heads_, *step.shape, step.k_cache, table.data(), layer_scores(step.layer), table.data());
      if (completes) {
        selection.score_table = table.data();
        selection.move_scores = true;
        kernels_.select_and_compact(step.k_cache, step.v_cache, *step.shape, layer_scores(step.layer), selection);
      }
    } else if (completes) {
      // The SnapKV family: the window's votes in scratch scores of the sequence's length (their own blocks,
      // numbered in order), selection, compaction; the scratch is gone after the layer.
      const int window = std::min(b.recent > 0 ? b.recent : 1, chunk);
      std::vector<std::int32_t> identity(table.size());
      std::iota(identity.begin(), identity.end(), 0);
      const std::int64_t floats = static_cast<std::int64_t>(identity.size()) * shape_.block_size * shape_.kv_heads;
      kernels::PagedScores votes{static_cast<float*>(allocator_.allocate(4 * floats, "activations.snapkv_votes")),
                                 shape_.block_size, shape_.kv_heads};
      kernels_.fill(votes.data, floats, 0.0f);
      const int first = row + chunk - window;
      kernels_.score_prompt(step.rows + static_cast<std::int64_t>(first) * step.row_stride, step.row_stride, window,
                            q.prefilled + chunk - window, q_heads_, *step.shape, step.k_cache, table.data(), votes, identity.data());
      selection.score_table = identity.data();
      selection.pooling = s_.inference->kv_cache.compression.pooling_kernel;
      kernels_.select_and_compact(step.k_cache, step.v_cache, *step.shape, votes, selection);
      allocator_.release(votes.data);
    }
    row += chunk;
  }
}

}  // namespace memtwin::hw
