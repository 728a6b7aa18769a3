#pragma once
// CUDA implementations of the KV kernels (kv_kernels.h): the same layouts and semantics; every
// pointer is device memory. Launchers validate like the CPU ones and throw std::invalid_argument on
// misuse, std::runtime_error naming the CUDA call on a CUDA failure.
#include <cstddef>

#include "kernels/kv_kernels.h"

namespace memtwin::kernels::cuda {

/// True when a CUDA device is usable (tests skip, visibly, when not).
bool device_available();

/// Split-K decode attention: each (sequence, KV head) is split over the context in chunks of
/// `split_tokens`, computed in parallel and combined with their softmax statistics.
/// `workspace` must hold workspace_bytes(args, split_tokens) bytes of device memory.
std::size_t workspace_bytes(const DecodeAttentionArgs& a, int split_tokens);
void decode_attention(const DecodeAttentionArgs& a, void* workspace, int split_tokens = 512);

/// Quantises and writes vectors into a paged cache (reshape_and_cache), one warp per (token, head).
void write_paged(const float* values, const std::int64_t* slot_mapping, int tokens, const PagedShape& shape,
                 std::uint8_t* cache);

}  // namespace memtwin::kernels::cuda
