#pragma once
// What one transformer block costs one GPU for one micro-batch of a training step: the FLOPs and
// bytes of its GEMMs (with the shapes they multiply, forward and backward), attention and
// memory-bound kernels, the activations it stores, its parameters, and - with expert parallelism -
// its experts' share and the token exchange. The stage programs (stage_program.cpp) turn it into ops.
#include <vector>

#include "models/plan/plan.h"
#include "models/scenario.h"

namespace memtwin {

struct BlockCost {
  double gemm_flops = 0, gemm_bytes = 0;       // forward
  double attention_flops = 0, attention_bytes = 0;
  double elementwise_bytes = 0;                // forward memory-bound kernels (norms, rotary, SwiGLU, residuals)
  double activation_bytes = 0;                 // stored for backward
  double params = 0;                           // this rank's share of the block
  double expert_params = 0;                    // of which experts (MoE): reduced over the expert-data-parallel group
  double dispatch_bytes = 0;                   // MoE with expert parallelism: one all-to-all's buffer per rank
  double context_kv_bytes = 0;                 // context parallelism: the block's keys and values, gathered
  std::vector<GemmShape> gemm_shapes;          // the forward's matrix multiplies on this rank
  std::vector<GemmShape> backward_shapes;      // the backward's: input and weight gradients of each
  std::vector<GemmShape> attention_shapes;     // QK^T and AV over the whole score matrix, per head
};

BlockCost block_cost(const Scenario& scenario);

}  // namespace memtwin
