#pragma once
// The vectorised decode attention (decode_attention_avx2.cpp, compiled for AVX2 + FMA + F16C) and
// the check that this CPU can run it. Internal to kernels/: decode_attention() dispatches.
#include "kernels/kv_kernels.h"

namespace memtwin::kernels {
/// Both kernels' last step when a.probs is set: heads [first_head, first_head + heads) of the
/// sequence, from their softmax numerators ([heads, context] in a row each) and denominators.
void write_probabilities(const DecodeAttentionArgs& a, int seq, int first_head, int heads, const float* numerators,
                         const float* denominators);
}  // namespace memtwin::kernels

namespace memtwin::kernels::simd {

/// Whether the CPU has AVX2, FMA and F16C and the build has the kernel.
bool avx2_supported();

/// Attends one sequence's KV heads first_kv_head .. first_kv_head + kv_heads - 1 (and their query
/// heads) as the portable kernel does each (sequence, KV head) pair; false (nothing written) for
/// shapes it does not handle (head_dim not a multiple of 16 or above 256, quantisation
/// groups not a multiple of 8, GQA groups other than 1, 2, 4, 8), which the portable kernel then takes.
bool attend_heads_avx2(const DecodeAttentionArgs& a, int seq, int first_kv_head, int kv_heads);

}  // namespace memtwin::kernels::simd
