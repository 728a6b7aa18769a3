#pragma once
// What the serving engine's forward pass (hw/serving_engine.cpp) needs from a device: the model's
// GEMMs and its memory-bound kernels, the paged KV cache's write and decode attention, greedy
// sampling. The host device implements it with OpenBLAS and the CPU kernels
// (hw/host/host_serving_kernels.h), the CUDA device with cuBLAS and kernels/cuda
// (hw/cuda/cuda_serving.cu).
//
// Contract: tensors (`float*`, caches) are device memory from the run's caching allocator; the
// per-iteration metadata (slot mappings, positions, block tables, context lengths) is host memory
// and the implementation moves it where its kernels read it. Calls run in order; `argmax_rows` and
// `synchronize` return only when everything before them is done (the engine reads the clock
// after them). Misuse throws std::invalid_argument, a device failure std::runtime_error naming
// the call.
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "kernels/eviction.h"
#include "kernels/kivi_paged.h"
#include "kernels/kv_kernels.h"

namespace memtwin::hw {

class ServingKernels {
 public:
  virtual ~ServingKernels() = default;
  /// C = A B + beta C, row-major: A [rows, inner] (leading dimension lda), B [inner, cols] (ldb),
  /// C [rows, cols] (ldc).
  virtual void gemm(int rows, int cols, int inner, const float* a, int lda, const float* b, int ldb, float beta, float* c,
                    int ldc) = 0;
  virtual void fill(float* x, std::int64_t count, float value) = 0;
  /// RMSNorm of each of `tokens` rows of `hidden` floats: x / sqrt(mean(x^2) + eps), times
  /// `weight` [hidden] (device memory) or unit weights where it is null.
  virtual void rms_norm(const float* in, float* out, int tokens, int hidden, const float* weight, float eps) = 0;
  /// Rotary position embedding (rotate-half form, base `theta`) of the first `heads` slices of
  /// head_dim floats in each of `tokens` rows `row_stride` apart; positions[tokens] (host).
  virtual void rotary(float* rows, int tokens, int row_stride, int heads, int head_dim, const std::int32_t* positions,
                      double theta) = 0;
  /// SiLU(gate) x up (or SiLU alone when not gated) of each row: gate = row[0, inner), up =
  /// row[inner, 2 inner) when gated; the result goes to row[up_width, up_width + inner), where
  /// up_width is 2 inner gated or inner ungated.
  virtual void activation(float* rows, int tokens, int row_stride, int inner, bool gated) = 0;
  /// dst row r [0, cols) = src row r [0, cols), for `rows` rows of the given strides.
  virtual void copy_rows(const float* src, int src_stride, float* dst, int dst_stride, int rows, int cols) = 0;
  /// kernels::write_paged; slot_mapping[tokens] is host memory.
  virtual void write_paged(const float* values, const std::int64_t* slot_mapping, int tokens,
                           const kernels::PagedShape& shape, std::uint8_t* cache) = 0;
  /// kernels::decode_attention; a.block_tables and a.context_lens are host memory. a.probs (the
  /// probabilities, for eviction) only where supports_score_eviction().
  virtual void decode_attention(const kernels::DecodeAttentionArgs& a) = 0;

  // Score-based eviction (H2O, SnapKV; kernels/eviction.h). Scores are device memory; block
  // tables, context lengths and slot mappings host memory.
  /// Whether the device runs the three calls below and decode attention's probabilities.
  [[nodiscard]] virtual bool supports_score_eviction() const { return false; }
  /// Zeroes the scores of the slots about to take new tokens (slot_mapping as write_paged's).
  virtual void clear_scores(const kernels::PagedScores&, const std::int64_t* /*slot_mapping*/, int /*tokens*/) { no_eviction(); }
  virtual void accumulate_scores(const float* /*probs*/, int /*rows*/, int /*q_heads*/, int /*probs_stride*/,
                                 const std::int32_t* /*block_tables*/, int /*max_blocks_per_seq*/,
                                 const std::int32_t* /*context_lens*/, const kernels::PagedScores&) {
    no_eviction();
  }
  virtual void select_and_compact(std::uint8_t* /*k_cache*/, std::uint8_t* /*v_cache*/, const kernels::PagedShape&,
                                  const kernels::PagedScores&, const kernels::PromptSelection&) {
    no_eviction();
  }
  /// Prompt queries' scores, as an eager attention computes its weights (H2O's prompt, SnapKV's
  /// window): `rows` consecutive queries of one sequence (row r at position first_position + r,
  /// q_heads x head_dim floats each, `row_stride` apart) against its cached keys (block_table), a
  /// QK^T product per query head, each row's causal softmax, and its probabilities added to its KV
  /// head's scores (through score_table).
  virtual void score_prompt(const float* /*queries*/, int /*row_stride*/, int /*rows*/, int /*first_position*/, int /*q_heads*/,
                            const kernels::PagedShape&, const std::uint8_t* /*k_cache*/, const std::int32_t* /*block_table*/,
                            const kernels::PagedScores&, const std::int32_t* /*score_table*/) {
    no_eviction();
  }
  /// H2O's per-step promotion for every decoding sequence of a layer at once (host arrays in `t`).
  virtual void promote_leaving_tokens(std::uint8_t* /*k_cache*/, std::uint8_t* /*v_cache*/, const kernels::PagedShape&,
                                      const kernels::PagedScores&, const kernels::LeavingTokens& /*t*/) {
    no_eviction();
  }

  // KIVI (kernels/kivi_paged.h): per layer, a KiviPagedShape region of the pool. Keys, values,
  // caches and staged residuals are device memory; the arguments' per-sequence arrays and block
  // tables host memory.
  /// Whether the device runs the three calls below.
  [[nodiscard]] virtual bool supports_kivi() const { return false; }
  virtual void kivi_append(const kernels::KiviAppendArgs& /*a*/) { no_kivi(); }
  virtual void kivi_stage_residual(const std::uint8_t* /*cache*/, const std::int32_t* /*block_table*/, std::int64_t /*tokens*/,
                                   const kernels::KiviPagedShape&, std::uint16_t* /*out*/) {
    no_kivi();
  }
  virtual void kivi_decode_attention(const kernels::KiviDecodeArgs& /*a*/) { no_kivi(); }

  /// Copies `bytes` from host memory to device memory, and back (returning when it is there).
  virtual void upload(void* device, const void* host, std::int64_t bytes) = 0;
  virtual void download(void* host, const void* device, std::int64_t bytes) = 0;

  /// Causal self-attention of one whole prompt (a real model's prefill): `tokens` consecutive rows
  /// `row_stride` apart, each [q | k | v] (q_heads, then kv_heads twice, head_dim floats each, k
  /// already rotated), query t against keys 0..t, grouped-query heads sharing their KV head; the
  /// result [tokens, q_heads x head_dim] at `out`, rows `out_stride` apart.
  [[nodiscard]] virtual bool supports_causal_attention() const { return false; }
  virtual void causal_attention(const float* /*rows*/, int /*row_stride*/, int /*tokens*/, int /*q_heads*/, int /*kv_heads*/,
                                int /*head_dim*/, float* /*out*/, int /*out_stride*/) {
    throw std::logic_error("this device does not compute prompt attention yet (a real model's prefill)");
  }

  /// Prefill attention's products for a chunk of `queries` against `keys` (per head: QK^T then
  /// PV), as the iteration model counts them.
  virtual void prefill_attention(std::int64_t queries, std::int64_t keys, int head_dim, int heads) = 0;
  /// The index of each row's largest value (greedy sampling), into out[rows].
  virtual void argmax_rows(const float* x, int rows, int cols, std::vector<int>& out) = 0;
  /// Moves `bytes` over the host link and back, as swap preemption does.
  virtual void swap(std::int64_t bytes) = 0;
  virtual void synchronize() = 0;
  /// Whether every call returns when its work is done (the host device), so that a clock around a
  /// call times it (hw/timed_serving_kernels.h); false for devices whose calls return at launch.
  [[nodiscard]] virtual bool synchronous() const { return false; }

 private:
  [[noreturn]] static void no_eviction() { throw std::logic_error("this device does not run score-based eviction"); }
  [[noreturn]] static void no_kivi() { throw std::logic_error("this device does not run KIVI's kernels"); }
};

}  // namespace memtwin::hw
