#include "hw/cuda/cuda_eviction.h"

#include <cmath>
#include <stdexcept>

#include "hw/cuda/cuda_check.h"
#include "kernels/cuda/kv_cuda.h"

namespace memtwin::hw::cuda_eviction {

void score_prompt(cublasHandle_t blas, const float* queries, int row_stride, int rows, int first_position, int q_heads,
                  const kernels::PagedShape& shape, const std::uint8_t* k_cache, const std::int32_t* block_table,
                  const kernels::PagedScores& scores, const std::int32_t* score_table, float* keys, float* logits) {
  if (rows <= 0) return;
  const int hd = shape.format.head_dim, total = first_position + rows, group = q_heads / shape.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd)), zero = 0.0f;
  for (int kvh = 0; kvh < shape.kv_heads; ++kvh) {
    kernels::cuda::gather_keys(k_cache, shape, block_table, kvh, total, keys);
    for (int g = 0; g < group; ++g) {
      // Row-major logits[rows, total] = Q_h K^T, as column-major logits^T = K (Q_h)^T.
      check(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, total, rows, hd, &scale, keys, hd,
                        queries + static_cast<long>(kvh * group + g) * hd, row_stride, &zero, logits, total),
            "cublasSgemm (prompt scores)");
      kernels::cuda::add_causal_softmax(logits, rows, total, first_position, score_table, kvh, scores);
    }
  }
}

}  // namespace memtwin::hw::cuda_eviction
