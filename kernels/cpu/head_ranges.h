#pragma once
// Internal to kernels/cpu: how the decode attention kernels share a call's work between threads.
// The vectorised kernels (paged and KIVI) attend a sequence's KV heads together, reading their
// vectors in memory order; with more threads than sequences each sequence is split into ranges of
// consecutive KV heads, as many as it takes to give every thread work.
#include <algorithm>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace memtwin::kernels {

/// Whether a call of `tokens` tokens in all over `kv_heads` KV heads is worth threads: below about
/// 100 us of work here, waking them costs more than the call takes.
inline bool worth_threads(long tokens, int kv_heads) { return tokens * kv_heads >= (1L << 12); }

/// A call's work units: unit u is sequence seq's KV heads [first, first + count).
class HeadRanges {
 public:
  struct Unit {
    int seq, first, count;
  };
  /// `parallel`: whether the call runs on threads (then as many as OpenMP gives).
  HeadRanges(int num_seqs, int kv_heads, bool parallel) : kv_heads_(kv_heads) {
    int threads = 1;
#ifdef _OPENMP
    if (parallel) threads = omp_get_max_threads();
#endif
    const int ranges = std::clamp((threads + num_seqs - 1) / num_seqs, 1, kv_heads);
    per_range_ = (kv_heads + ranges - 1) / ranges;
    units_per_seq_ = (kv_heads + per_range_ - 1) / per_range_;
    units_ = num_seqs * units_per_seq_;
  }
  [[nodiscard]] int units() const { return units_; }
  [[nodiscard]] Unit operator[](int unit) const {
    const int first = unit % units_per_seq_ * per_range_;
    return {unit / units_per_seq_, first, std::min(per_range_, kv_heads_ - first)};
  }

 private:
  int kv_heads_, per_range_ = 1, units_per_seq_ = 1, units_ = 0;
};

}  // namespace memtwin::kernels
