#pragma once
// H2O's prompt scores on a CUDA device (hw/serving_kernels.h: score_prompt): the QK^T product per
// query head by cuBLAS between kernels/cuda's key gather and causal softmax. The other eviction
// calls are kernels/cuda's (kv_cuda.h). Written for the CUDA build; not yet run on a GPU.
#include <cublas_v2.h>

#include <cstdint>

#include "kernels/eviction.h"
#include "kernels/kv_kernels.h"

namespace memtwin::hw::cuda_eviction {

/// ServingKernels::score_prompt: `block_table` device memory; `keys` holds (first_position + rows)
/// x head_dim floats and `logits` rows x (first_position + rows), device scratch.
void score_prompt(cublasHandle_t blas, const float* queries, int row_stride, int rows, int first_position, int q_heads,
                  const kernels::PagedShape& shape, const std::uint8_t* k_cache, const std::int32_t* block_table,
                  const kernels::PagedScores& scores, const std::int32_t* score_table, float* keys, float* logits);
}  // namespace memtwin::hw::cuda_eviction
