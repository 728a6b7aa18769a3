#pragma once
// Kernels that eviction methods need besides attention: H2O's accumulated attention scores,
// SnapKV's pooled observation-window scores, per-head attention entropy (entropy-guided budgets),
// the choice of tokens to keep, and compaction of a head's paged vectors to the kept tokens.
#include <cstdint>
#include <vector>

#include "kernels/kv_format.h"

namespace memtwin::kernels {

/// H2O: adds each query head's probabilities to its KV head's running scores (GQA groups sum).
///   probs   // [q_heads, tokens]
///   scores  // [kv_heads, tokens], accumulated in place
void accumulate_attention(const float* probs, int q_heads, int kv_heads, int tokens, float* scores);

/// SnapKV: votes of the last `window` queries for every earlier token, summed over the window
/// and max-pooled over `kernel` neighbouring tokens (odd kernel; 1 = no pooling).
///   attention  // [heads, window, tokens]
///   out        // [heads, tokens]
void snapkv_scores(const float* attention, int heads, int window, int tokens, int kernel, float* out);

/// Shannon entropy (nats) of each head's attention distribution.
///   probs  // [heads, tokens], each row summing to 1
void attention_entropy(const float* probs, int heads, int tokens, float* out);

/// The tokens to keep, ascending: the first `sinks`, the last `recent`, and the highest-scored of
/// the rest up to `keep` in all (ties to the older token). Keeps everything when tokens <= keep.
std::vector<int> select_tokens(const float* scores, int tokens, int keep, int sinks, int recent);

/// Moves one KV head's vectors of the `kept` tokens (ascending logical positions) to logical
/// positions 0..kept.size()-1 of the same sequence, in place. Other heads are untouched.
///   cache        // [num_blocks, block_size, kv_heads, vector_bytes]
///   block_table  // the sequence's logical -> physical blocks
void compact_head(std::uint8_t* cache, const PagedShape& shape, const std::int32_t* block_table, int head,
                  const std::vector<int>& kept);

}  // namespace memtwin::kernels
