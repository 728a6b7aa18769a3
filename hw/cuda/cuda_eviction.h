#pragma once
// Score-based eviction on a CUDA device (H2O, SnapKV, PyramidKV; hw/kv_eviction.h): the serving engine's
// ServingKernels calls of hw/serving_kernels.h, with the metadata already in device memory.
// Same semantics and layouts as the CPU kernels of kernels/eviction.h; scores accumulate with
// atomics (sums in any order), selection and compaction are kernels/cuda's. Everything runs on the
// legacy default stream. Written for the CUDA build; not yet run on a GPU.
#include <cublas_v2.h>

#include <cstdint>

#include "kernels/eviction.h"
#include "kernels/kv_kernels.h"

namespace memtwin::hw::cuda_eviction {

/// Each query head's softmax probabilities into a.probs (a.out is not written): a.block_tables and
/// a.context_lens are device memory. fp16 and fp8 caches only (the eviction methods' formats).
void attention_probabilities(const kernels::DecodeAttentionArgs& a);
void clear_scores(const kernels::PagedScores& scores, const std::int64_t* slot_mapping, int tokens);
void accumulate_scores(const float* probs, int rows, int q_heads, int probs_stride, const std::int32_t* block_tables,
                       int max_blocks_per_seq, const std::int32_t* context_lens, const kernels::PagedScores& scores);
/// s.block_table and s.score_table are device memory.
void select_and_compact(std::uint8_t* k_cache, std::uint8_t* v_cache, const kernels::PagedShape& shape,
                        const kernels::PagedScores& scores, const kernels::PromptSelection& s);
/// ServingKernels::score_prompt: `block_table` device memory; `keys` holds (first_position + rows)
/// x head_dim floats and `logits` rows x (first_position + rows), device scratch.
void score_prompt(cublasHandle_t blas, const float* queries, int row_stride, int rows, int first_position, int q_heads,
                  const kernels::PagedShape& shape, const std::uint8_t* k_cache, const std::int32_t* block_table,
                  const kernels::PagedScores& scores, float* keys, float* logits);
void promote_leaving_token(std::uint8_t* k_cache, std::uint8_t* v_cache, const kernels::PagedShape& shape,
                           const kernels::PagedScores& scores, const std::int32_t* block_table, int heavy, int leaving);

}  // namespace memtwin::hw::cuda_eviction
