#pragma once
// An expert-parallel serving group on the host device: one MPI rank per replica (MPI_COMM_WORLD,
// as `memtwin validate` starts them), the exchanges of hw/serving_group.h as MPI collectives
// (Open MPI: shared memory between the ranks of one machine). Reductions are real fp32 sums.
//
// Contract: construct after MpiSession, on every rank; calls block until the group completes them.
#include <vector>

#include <mpi.h>

#include "hw/serving_group.h"

namespace memtwin::hw {

class MpiServingGroup final : public ServingGroup {
 public:
  MpiServingGroup();
  [[nodiscard]] int rank() const override { return rank_; }
  [[nodiscard]] int ranks() const override { return size_; }
  std::vector<std::int64_t> all_gather(const std::vector<std::int64_t>& mine) override;
  void all_gather_rows(const float* mine, float* all, const std::vector<int>& rows, int width) override;
  void reduce_scatter_add(const float* all, float* mine, const std::vector<int>& rows, int width) override;
  std::vector<std::string> gather_to_first(const std::string& text) override;

 private:
  /// Element counts and offsets of each rank's rows.
  void layout(const std::vector<int>& rows, int width);
  int rank_ = 0, size_ = 1;
  std::vector<int> counts_, offsets_;
  std::vector<float> received_;  // this rank's summed rows before they are added
};

}  // namespace memtwin::hw
