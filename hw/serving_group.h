#pragma once
// The other ranks of an expert-parallel serving group, as the serving engine (hw/serving_engine.h)
// exchanges with them: one rank per replica, each holding experts / ranks of every MoE layer's
// experts. The engine steps its rank in lockstep with the others (as vLLM's data-parallel
// coordinator does), routes every arrival from state they share, and moves a MoE layer's tokens
// the way the simulator prices it: the hidden states all-gathered to every rank, the experts'
// outputs reduce-scattered back (vLLM's all-gather / reduce-scatter expert parallelism).
// The host device implements it over MPI (hw/host/mpi_serving_group.h).
//
// Contract: every rank of the group makes the same calls in the same order (they are
// collective); buffers are device memory the caller owns; errors throw std::runtime_error.
#include <cstdint>
#include <string>
#include <vector>

namespace memtwin::hw {

class ServingGroup {
 public:
  virtual ~ServingGroup() = default;
  [[nodiscard]] virtual int rank() const = 0;
  [[nodiscard]] virtual int ranks() const = 0;
  /// Every rank's `mine` (the same length on each), rank after rank.
  virtual std::vector<std::int64_t> all_gather(const std::vector<std::int64_t>& mine) = 0;
  /// Rank r's `rows[r]` rows of `width` floats from its `mine`, into `all` in rank order.
  virtual void all_gather_rows(const float* mine, float* all, const std::vector<int>& rows, int width) = 0;
  /// The ranks' `all` (every rank's rows, in rank order) summed, this rank's rows added into `mine`.
  virtual void reduce_scatter_add(const float* all, float* mine, const std::vector<int>& rows, int width) = 0;
  /// Rank 0: every rank's `text`, in rank order; other ranks: empty.
  virtual std::vector<std::string> gather_to_first(const std::string& text) = 0;
};

}  // namespace memtwin::hw
