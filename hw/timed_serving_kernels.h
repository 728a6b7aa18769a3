#pragma once
// A device's serving kernels, observed call by call: every op's signature is recorded
// (models/serving/iteration_plan.h: the GEMM's shape, the cache format), so that the run's plan
// hash says which ops the engine executed; and on a device whose calls return when their work is
// done (ServingKernels::synchronous(): the host device) each call is timed and summed by kind of
// work, so that `memtwin validate` can compare each kind with what the simulator priced for it. An
// asynchronous device's calls return at launch; timing them would need a synchronisation per call
// that changes what is measured, so they are not timed. It wraps the device's kernels and forwards
// every call.
#include <chrono>
#include <set>
#include <string>

#include "hw/serving_kernels.h"
#include "models/serving/iteration_plan.h"

namespace memtwin::hw {

class TimedServingKernels final : public ServingKernels {
 public:
  /// Records the signature of every op into `ops`, and times the calls into `into` where the device
  /// is synchronous.
  TimedServingKernels(ServingKernels& device, IterationOpSeconds& into, std::set<std::string>& ops)
      : device_(device), into_(into), ops_(ops), timing_(device.synchronous()) {}

  /// Whether calls are timed (op_seconds and kernel_seconds are filled).
  [[nodiscard]] bool timing() const { return timing_; }
  /// Seconds inside the device's kernels so far (every kind).
  [[nodiscard]] double kernel_seconds() const { return kernel_seconds_; }

  void gemm(int rows, int cols, int inner, const float* a, int lda, const float* b, int ldb, float beta, float* c,
            int ldc) override {
    timed(IterationOp::weight_gemm, std::to_string(inner) + "x" + std::to_string(cols),
          [&] { device_.gemm(rows, cols, inner, a, lda, b, ldb, beta, c, ldc); });
  }
  void fill(float* x, std::int64_t count, float value) override {
    timed(IterationOp::elementwise, [&] { device_.fill(x, count, value); });
  }
  void rms_norm(const float* in, float* out, int tokens, int hidden, const float* weight, float eps) override {
    timed(IterationOp::elementwise, [&] { device_.rms_norm(in, out, tokens, hidden, weight, eps); });
  }
  void rotary(float* rows, int tokens, int row_stride, int heads, int head_dim, const std::int32_t* positions,
              double theta) override {
    timed(IterationOp::elementwise, [&] { device_.rotary(rows, tokens, row_stride, heads, head_dim, positions, theta); });
  }
  /// Copies in and out are set-up and read-out, not iteration work: forwarded, not counted.
  void upload(void* device, const void* host, std::int64_t bytes) override { device_.upload(device, host, bytes); }
  void download(void* host, const void* device, std::int64_t bytes) override { device_.download(host, device, bytes); }
  [[nodiscard]] bool supports_causal_attention() const override { return device_.supports_causal_attention(); }
  void causal_attention(const float* rows, int row_stride, int tokens, int q_heads, int kv_heads, int head_dim, float* out,
                        int out_stride) override {
    timed(IterationOp::prefill_attention,
          [&] { device_.causal_attention(rows, row_stride, tokens, q_heads, kv_heads, head_dim, out, out_stride); });
  }
  void activation(float* rows, int tokens, int row_stride, int inner, bool gated) override {
    timed(IterationOp::elementwise, [&] { device_.activation(rows, tokens, row_stride, inner, gated); });
  }
  void copy_rows(const float* src, int src_stride, float* dst, int dst_stride, int rows, int cols) override {
    timed(IterationOp::elementwise, [&] { device_.copy_rows(src, src_stride, dst, dst_stride, rows, cols); });
  }
  void write_paged(const float* values, const std::int64_t* slot_mapping, int tokens, const kernels::PagedShape& shape,
                   std::uint8_t* cache) override {
    timed(IterationOp::kv_write, kernels::element_name(shape.format.element),
          [&] { device_.write_paged(values, slot_mapping, tokens, shape, cache); });
  }
  void decode_attention(const kernels::DecodeAttentionArgs& a) override {
    timed(IterationOp::decode_attention, kernels::element_name(a.shape.format.element), [&] { device_.decode_attention(a); });
  }
  [[nodiscard]] bool supports_score_eviction() const override { return device_.supports_score_eviction(); }
  void clear_scores(const kernels::PagedScores& scores, const std::int64_t* slot_mapping, int tokens) override {
    timed(IterationOp::score_upkeep, [&] { device_.clear_scores(scores, slot_mapping, tokens); });
  }
  void accumulate_scores(const float* probs, int rows, int q_heads, int probs_stride, const std::int32_t* block_tables,
                         int max_blocks_per_seq, const std::int32_t* context_lens, const kernels::PagedScores& scores) override {
    timed(IterationOp::score_upkeep, [&] {
      device_.accumulate_scores(probs, rows, q_heads, probs_stride, block_tables, max_blocks_per_seq, context_lens, scores);
    });
  }
  void select_and_compact(std::uint8_t* k_cache, std::uint8_t* v_cache, const kernels::PagedShape& shape,
                          const kernels::PagedScores& scores, const kernels::PromptSelection& selection) override {
    timed(IterationOp::kv_selection, [&] { device_.select_and_compact(k_cache, v_cache, shape, scores, selection); });
  }
  void score_prompt(const float* queries, int row_stride, int rows, int first_position, int q_heads,
                    const kernels::PagedShape& shape, const std::uint8_t* k_cache, const std::int32_t* block_table,
                    const kernels::PagedScores& scores, const std::int32_t* score_table) override {
    timed(IterationOp::kv_selection, [&] {
      device_.score_prompt(queries, row_stride, rows, first_position, q_heads, shape, k_cache, block_table, scores, score_table);
    });
  }
  void promote_leaving_tokens(std::uint8_t* k_cache, std::uint8_t* v_cache, const kernels::PagedShape& shape,
                              const kernels::PagedScores& scores, const kernels::LeavingTokens& t) override {
    timed(IterationOp::score_upkeep, [&] { device_.promote_leaving_tokens(k_cache, v_cache, shape, scores, t); });
  }
  [[nodiscard]] bool supports_kivi() const override { return device_.supports_kivi(); }
  void kivi_append(const kernels::KiviAppendArgs& a) override {
    timed(IterationOp::kv_write, kivi_format(a.shape), [&] { device_.kivi_append(a); });
  }
  void kivi_stage_residual(const std::uint8_t* cache, const std::int32_t* block_table, std::int64_t tokens,
                           const kernels::KiviPagedShape& shape, std::uint16_t* out) override {
    timed(IterationOp::kv_write, kivi_format(shape), [&] { device_.kivi_stage_residual(cache, block_table, tokens, shape, out); });
  }
  void kivi_decode_attention(const kernels::KiviDecodeArgs& a) override {
    timed(IterationOp::decode_attention, kivi_format(a.shape), [&] { device_.kivi_decode_attention(a); });
  }
  void prefill_attention(std::int64_t queries, std::int64_t keys, int head_dim, int heads) override {
    timed(IterationOp::prefill_attention, [&] { device_.prefill_attention(queries, keys, head_dim, heads); });
  }
  void argmax_rows(const float* x, int rows, int cols, std::vector<int>& out) override {
    timed(IterationOp::elementwise, [&] { device_.argmax_rows(x, rows, cols, out); });
  }
  /// Swaps cross the host link outside the iteration's compute: forwarded, not counted.
  void swap(std::int64_t bytes) override { device_.swap(bytes); }
  void synchronize() override { device_.synchronize(); }
  [[nodiscard]] bool synchronous() const override { return device_.synchronous(); }

 private:
  static std::string kivi_format(const kernels::KiviPagedShape& shape) { return "kivi" + std::to_string(shape.bits); }
  template <class F>
  void timed(IterationOp op, F&& call) {
    timed(op, std::string(), std::forward<F>(call));
  }
  template <class F>
  void timed(IterationOp op, const std::string& detail, F&& call) {
    ops_.insert(op_signature(op, detail));
    if (!timing_) return call();
    const auto start = std::chrono::steady_clock::now();
    call();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    into_[op] += s;
    kernel_seconds_ += s;
  }
  ServingKernels& device_;
  IterationOpSeconds& into_;
  std::set<std::string>& ops_;
  bool timing_ = false;
  double kernel_seconds_ = 0;
};

}  // namespace memtwin::hw
