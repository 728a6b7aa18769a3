#pragma once
// CUDA implementations of the KV kernels (kv_kernels.h): the same layouts and semantics; every
// pointer is device memory. Launchers validate like the CPU ones and throw std::invalid_argument on
// misuse, std::runtime_error naming the CUDA call on a CUDA failure.
#include <cstddef>
#include <cstdint>

#include "kernels/eviction.h"
#include "kernels/kivi_paged.h"
#include "kernels/kv_kernels.h"

namespace memtwin::kernels::cuda {

/// True when a CUDA device is usable (tests skip, visibly, when not).
bool device_available();

/// Split-K decode attention: each (sequence, KV head) is split over the context in chunks of
/// `split_tokens`, computed in parallel and combined with their softmax statistics.
/// `workspace` must hold workspace_bytes(args, split_tokens) bytes of device memory.
std::size_t workspace_bytes(const DecodeAttentionArgs& a, int split_tokens);
void decode_attention(const DecodeAttentionArgs& a, void* workspace, int split_tokens = 512);

/// Quantises and writes vectors into a paged cache (reshape_and_cache), one thread per (token,
/// head, quantisation group; fp16 and fp8: per element).
void write_paged(const float* values, const std::int64_t* slot_mapping, int tokens, const PagedShape& shape,
                 std::uint8_t* cache);

/// KIVI keys (kivi.h), `blocks` groups of G tokens at once, one thread per (block, channel):
///   keys  // [blocks, group, head_dim] floats
///   out   // [blocks, head_dim * (ceil(group * bits / 8) + 4)] bytes, the CPU kernel's layout
void quantize_keys_per_channel(const float* keys, int blocks, int group, int head_dim, int bits, std::uint8_t* out);
void dequantize_keys_per_channel(const std::uint8_t* in, int blocks, int group, int head_dim, int bits, float* keys);

/// KIVI's paged cache (kivi_paged.h), the CPU kernels' layout and arithmetic; every pointer device
/// memory, `staged` a device array of device pointers. The GPU append reads a quantising
/// sequence's old residual only from its staged copy (its groups overwrite where it was, while
/// other threads read), so a sequence whose append quantises with old residual tokens must be
/// staged; the serving engine stages every such sequence.
void kivi_append(const KiviAppendArgs& a);
/// `block_table` in device memory; `out` as the CPU's.
void kivi_stage_residual(const std::uint8_t* cache, const std::int32_t* block_table, std::int64_t tokens, const KiviPagedShape& shape,
                         std::uint16_t* out);
/// Decode attention; the scores go through `workspace`, kivi_workspace_bytes(a, max_context) bytes,
/// max_context at least every context length.
std::size_t kivi_workspace_bytes(const KiviDecodeArgs& a, int max_context);
void kivi_decode_attention(const KiviDecodeArgs& a, float* workspace, int max_context);

/// Eviction support (eviction.h), same arguments and layouts as the CPU kernels.
void accumulate_attention(const float* probs, int q_heads, int kv_heads, int tokens, float* scores);
void snapkv_scores(const float* attention, int heads, int window, int tokens, int kernel, float* out);
void attention_entropy(const float* probs, int heads, int tokens, float* out);
/// The tokens to keep, ascending, as the CPU select_tokens chooses them (ties to the older token):
///   scores  // [tokens]
///   kept    // [min(tokens, keep)] device ints, written
/// Returns how many were written. Sorts with Thrust on the current stream.
int select_tokens(const float* scores, int tokens, int keep, int sinks, int recent, std::int32_t* kept);
/// Moves one KV head's vectors of the kept tokens to logical positions 0..count-1, in place.
///   block_table  // the sequence's logical -> physical blocks (device)
///   kept         // [count] ascending logical positions (device); a descending pair is reported
///                // as std::invalid_argument after the kernel (nothing is moved then)
void compact_head(std::uint8_t* cache, const PagedShape& shape, const std::int32_t* block_table, int head,
                  const std::int32_t* kept, int count);


/// The serving engine's score-based eviction (eviction.h's PagedScores layout; block tables and
/// lengths in device memory, like everything else here):
/// each query head's softmax probabilities into a.probs (a.out not written); fp16 and fp8 caches.
void attention_probabilities(const DecodeAttentionArgs& a);
/// Zeroes the scores of the slots about to take new tokens (write_paged's slot mapping).
void clear_scores(const PagedScores& scores, const std::int64_t* slot_mapping, int tokens);
void accumulate_paged_scores(const float* probs, int rows, int q_heads, int probs_stride, const std::int32_t* block_tables,
                             int max_blocks_per_seq, const std::int32_t* context_lens, const PagedScores& scores);
void select_and_compact(std::uint8_t* k_cache, std::uint8_t* v_cache, const PagedShape& shape, const PagedScores& scores,
                        const PromptSelection& s);
/// H2O's promotion (kernels/eviction.h) for every sequence of `t` at once (device pointers): one
/// launch, a block per (KV head, sequence).
void promote_leaving_tokens(std::uint8_t* k_cache, std::uint8_t* v_cache, const PagedShape& shape, const PagedScores& scores,
                            const LeavingTokens& t);
/// H2O's prompt scores around the QK^T product: one KV head's keys of the first `tokens` tokens,
/// dequantised into out[tokens, head_dim]; then each of `rows` rows of logits[rows, keys] (query
/// row r at position first_position + r) softmaxed causally and added to the head's scores.
void gather_keys(const std::uint8_t* k_cache, const PagedShape& shape, const std::int32_t* block_table, int head, int tokens,
                 float* out);
void add_causal_softmax(float* logits, int rows, int keys, int first_position, const std::int32_t* block_table, int head,
                        const PagedScores& scores);

}  // namespace memtwin::kernels::cuda
