#pragma once
// The kinds of work in a serving iteration: one list that the iteration model prices
// (IterationModel::compute_breakdown), that a hardware engine times call by call
// (hw/timed_serving_kernels.h), and that `memtwin validate` compares kind by kind
// (`op_time_s.KIND`), so that a serving error points at the work that causes it.
#include <array>
#include <cstddef>
#include <cstdint>

namespace memtwin {

enum class IterationOp : std::size_t {
  weight_gemm,        ///< the weight GEMMs (serving_gemms.h)
  decode_attention,   ///< the decoding sequences against their cached K and V
  prefill_attention,  ///< prompt chunks against their prefix and themselves
  kv_write,           ///< new tokens' K and V quantised and written into the paged cache
  kv_selection,       ///< scoring a prompt and compacting what is kept (a prompt vote; accumulated scores' prompt)
  score_upkeep,       ///< per decode step: accumulated attention scores and their evictions
  elementwise,        ///< norms, rotary embedding, activation, copies, sampling
  collective,         ///< between GPUs: tensor parallelism's all-reduces, expert parallelism's
                      ///< all-gathers and reduce-scatters, with the wait for a lockstep group's slowest
  host,               ///< the host's part of an iteration: dispatch, bookkeeping between kernels
  count
};

inline constexpr std::size_t kIterationOps = static_cast<std::size_t>(IterationOp::count);
inline constexpr std::array<const char*, kIterationOps> kIterationOpNames = {
    "weight_gemm", "decode_attention", "prefill_attention", "kv_write", "kv_selection", "score_upkeep", "elementwise", "collective", "host"};

/// A set of kinds, one bit each.
using IterationOpKinds = std::uint32_t;
constexpr IterationOpKinds op_bit(IterationOp op) { return IterationOpKinds{1} << static_cast<std::size_t>(op); }

/// Seconds by kind, summed over iterations (per GPU of a replica, over every replica).
struct IterationOpSeconds {
  std::array<double, kIterationOps> seconds{};
  double& operator[](IterationOp op) { return seconds[static_cast<std::size_t>(op)]; }
  double operator[](IterationOp op) const { return seconds[static_cast<std::size_t>(op)]; }
  [[nodiscard]] double total() const {
    double t = 0;
    for (double s : seconds) t += s;
    return t;
  }
  IterationOpSeconds& operator+=(const IterationOpSeconds& o) {
    for (std::size_t i = 0; i < kIterationOps; ++i) seconds[i] += o.seconds[i];
    return *this;
  }
};

}  // namespace memtwin
