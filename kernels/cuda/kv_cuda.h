#pragma once
// CUDA implementations of the KV kernels (kv_kernels.h): the same layouts and semantics; every
// pointer is device memory. Launchers validate like the CPU ones and throw std::invalid_argument on
// misuse, std::runtime_error naming the CUDA call on a CUDA failure.
#include <cstddef>
#include <cstdint>

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

}  // namespace memtwin::kernels::cuda
