#pragma once
// The serving engine's kernels on the host device (hw/serving_kernels.h): OpenBLAS sgemm with the
// model's shapes, the CPU KV kernels, and the blocks' norms, rotary embedding and activation as
// plain loops the compiler vectorises. Host memory is device memory here, so metadata is read in
// place and nothing needs synchronising.
#include <vector>

#include "hw/host/host_kernels.h"
#include "hw/serving_kernels.h"

namespace memtwin::hw {

class HostServingKernels final : public ServingKernels {
 public:
  void gemm(int rows, int cols, int inner, const float* a, int lda, const float* b, int ldb, float beta, float* c,
            int ldc) override;
  void fill(float* x, std::int64_t count, float value) override;
  void rms_norm(const float* in, float* out, int tokens, int hidden, const float* weight, float eps) override;
  void rotary(float* rows, int tokens, int row_stride, int heads, int head_dim, const std::int32_t* positions,
              double theta) override;
  void upload(void* device, const void* host, std::int64_t bytes) override;
  void download(void* host, const void* device, std::int64_t bytes) override;
  [[nodiscard]] bool supports_causal_attention() const override { return true; }
  void causal_attention(const float* rows, int row_stride, int tokens, int q_heads, int kv_heads, int head_dim, float* out,
                        int out_stride) override;
  void activation(float* rows, int tokens, int row_stride, int inner, bool gated) override;
  void copy_rows(const float* src, int src_stride, float* dst, int dst_stride, int rows, int cols) override;
  void write_paged(const float* values, const std::int64_t* slot_mapping, int tokens, const kernels::PagedShape& shape,
                   std::uint8_t* cache) override;
  void decode_attention(const kernels::DecodeAttentionArgs& a) override;
  [[nodiscard]] bool supports_score_eviction() const override { return true; }
  void clear_scores(const kernels::PagedScores& scores, const std::int64_t* slot_mapping, int tokens) override;
  void accumulate_scores(const float* probs, int rows, int q_heads, int probs_stride, const std::int32_t* block_tables,
                         int max_blocks_per_seq, const std::int32_t* context_lens, const kernels::PagedScores& scores) override {
    kernels::accumulate_paged_scores(probs, rows, q_heads, probs_stride, block_tables, max_blocks_per_seq, context_lens, scores);
  }
  void select_and_compact(std::uint8_t* k_cache, std::uint8_t* v_cache, const kernels::PagedShape& shape,
                          const kernels::PagedScores& scores, const kernels::PromptSelection& selection) override {
    kernels::select_and_compact(k_cache, v_cache, shape, scores, selection);
  }
  void score_prompt(const float* queries, int row_stride, int rows, int first_position, int q_heads,
                    const kernels::PagedShape& shape, const std::uint8_t* k_cache, const std::int32_t* block_table,
                    const kernels::PagedScores& scores, const std::int32_t* score_table) override;
  void promote_leaving_tokens(std::uint8_t* k_cache, std::uint8_t* v_cache, const kernels::PagedShape& shape,
                              const kernels::PagedScores& scores, const kernels::LeavingTokens& t) override {
    kernels::promote_leaving_tokens(k_cache, v_cache, shape, scores, t);
  }
  [[nodiscard]] bool supports_kivi() const override { return true; }
  void kivi_append(const kernels::KiviAppendArgs& a) override { kernels::kivi_append(a); }
  void kivi_stage_residual(const std::uint8_t* cache, const std::int32_t* block_table, std::int64_t tokens,
                           const kernels::KiviPagedShape& shape, std::uint16_t* out) override {
    kernels::kivi_stage_residual(cache, block_table, tokens, shape, out);
  }
  void kivi_decode_attention(const kernels::KiviDecodeArgs& a) override { kernels::kivi_decode_attention(a); }
  void prefill_attention(std::int64_t queries, std::int64_t keys, int head_dim, int heads) override;
  void argmax_rows(const float* x, int rows, int cols, std::vector<int>& out) override;
  void swap(std::int64_t bytes) override;
  void synchronize() override {}
  [[nodiscard]] bool synchronous() const override { return true; }

 private:
  HostKernels kernels_;                   ///< attention products and swap copies over its workspace
  int rope_dim_ = 0;                      ///< head_dim the tables are for
  double rope_theta_ = 0;                 ///< and the base
  std::vector<float> rope_cos_, rope_sin_;  ///< [positions, head_dim / 2], grown on demand
  std::vector<float> keys_, logits_;        ///< score_prompt's dequantised keys and QK^T (causal_attention's scores)
};

}  // namespace memtwin::hw
