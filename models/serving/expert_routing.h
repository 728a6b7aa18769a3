#pragma once
// Which rows of an iteration a MoE layer sends to which expert, when the router's logits carry no
// routing (the host and CUDA engines run synthetic weights). One place decides it, so that the
// engines execute what the iteration model prices: balanced routing, the aim of a trained
// router's load-balancing loss.
//
// Token t's j-th choice (j < top-k) is expert (t x top-k + j) mod experts. The token-expert pairs
// of n tokens are then the consecutive numbers 0 .. n x top-k - 1 taken modulo the experts, so
//  * each token's top-k experts are distinct (top-k <= experts),
//  * min(experts, n x top-k) experts get rows, each floor or ceil(n x top-k / experts) of them,
//    which is IterationModel::experts_touched's min(1, n x top-k / experts) of the experts,
//  * an expert's tokens for one choice j are an arithmetic progression (stride experts /
//    gcd(top-k, experts)), so an engine reads and writes them as strided rows: one GEMM per run,
//    no scatter.
#include <vector>

namespace memtwin {

/// Rows first, first + stride, ..., count of them, routed to one expert as the same choice j.
struct ExpertRun {
  int first = 0;
  int stride = 1;
  int count = 0;
};

/// The runs of `rows` tokens routed to `expert` of `experts` with `top_k` choices each (in choice
/// order; runs without rows left out). Throws std::invalid_argument unless
/// 1 <= top_k <= experts, 0 <= expert < experts and rows >= 0.
std::vector<ExpertRun> expert_runs(int rows, int experts, int top_k, int expert);

}  // namespace memtwin
