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

// Scores in a paged layout, as the serving engine keeps them beside its paged K and V: one float
// per (token, KV head), [num_blocks, block_size, kv_heads], addressed through a block table.
struct PagedScores {
  float* data = nullptr;
  int block_size = 16;
  int kv_heads = 8;
  [[nodiscard]] float* at(const std::int32_t* block_table, int logical, int head) const {
    return data + (static_cast<std::size_t>(block_table[logical / block_size]) * block_size + logical % block_size) * kv_heads +
           head;
  }
};

/// Adds attention probabilities to paged scores: row r (one query of some sequence) attended to
/// the first context_lens[r] tokens of the sequence whose block table is row r of block_tables;
/// each KV head's score gains the probabilities of its GQA group's query heads. Rows may share a
/// sequence (a prefill chunk's queries): they add up.
///   probs  // [rows, q_heads, probs_stride] (decode_attention's DecodeAttentionArgs::probs)
void accumulate_paged_scores(const float* probs, int rows, int q_heads, int probs_stride, const std::int32_t* block_tables,
                             int max_blocks_per_seq, const std::int32_t* context_lens, const PagedScores& scores);

/// One sequence's selection after its prompt: per KV head, select_tokens over its first `tokens`
/// tokens' scores (max-pooled over `pooling` neighbours first, SnapKV; 1 = none), then K and V
/// (and the scores themselves when `move_scores`, H2O) compacted to the kept tokens.
struct PromptSelection {
  const std::int32_t* block_table = nullptr;  // the sequence's K and V blocks
  const std::int32_t* score_table = nullptr;  // the blocks of its scores
  int tokens = 0, keep = 0, recent = 0, pooling = 1;
  bool move_scores = false;
};
void select_and_compact(std::uint8_t* k_cache, std::uint8_t* v_cache, const PagedShape& shape, const PagedScores& scores,
                        const PromptSelection& s);

/// H2O's eviction in a full cache: logical [0, heavy) hold the heavy hitters, `leaving` the token
/// about to fall out of the recent window (its slot takes the new token next). Per KV head, the
/// leaving token takes the place of the lowest-scored heavy hitter (K, V and score) when it scored
/// higher, else it is dropped; ties keep the heavy hitter, as select_tokens keeps older tokens.
void promote_leaving_token(std::uint8_t* k_cache, std::uint8_t* v_cache, const PagedShape& shape, const PagedScores& scores,
                           const std::int32_t* block_table, int heavy, int leaving);

/// One decode step's leaving tokens, a sequence each: sequence i's block table at
/// block_tables + i x max_blocks_per_seq, its heavy hitters [0, heavy[i]) and its leaving token
/// leaving[i]. Sequences share no blocks here (their caches are full, nothing is a shared prefix).
struct LeavingTokens {
  const std::int32_t* block_tables = nullptr;
  int max_blocks_per_seq = 0;
  const std::int32_t* heavy = nullptr;
  const std::int32_t* leaving = nullptr;
  int sequences = 0;
};
/// promote_leaving_token for every sequence of `t`: one call (one launch on a GPU) a layer instead
/// of one a sequence.
void promote_leaving_tokens(std::uint8_t* k_cache, std::uint8_t* v_cache, const PagedShape& shape, const PagedScores& scores,
                            const LeavingTokens& t);

}  // namespace memtwin::kernels
