#pragma once
// Data-parallel communication volume of one training step, per GPU, in the closed forms of the
// ZeRO paper (§7) and the FSDP paper (Zhao et al. VLDB'23). The simulator's collectives must move
// exactly these bytes (a test checks it); these are the "what the network has to carry" numbers.
#include "models/scenario.h"
#include "models/units.h"

namespace memtwin {

struct DataParallelTraffic {
  double all_gather_bytes = 0;      ///< per GPU per step (sent), parameter gathers
  double reduce_scatter_bytes = 0;  ///< per GPU per step, gradient reduce-scatter
  double all_reduce_bytes = 0;      ///< per GPU per step, gradient all-reduce (counted as 2 (N-1)/N)
  double cross_host_bytes = 0;      ///< per GPU per step, the part that leaves the node
  [[nodiscard]] double total() const { return all_gather_bytes + reduce_scatter_bytes + all_reduce_bytes; }
};

/// Ring-collective volumes for one optimizer step (gradient accumulation does not add gradient
/// traffic; ZeRO-3/FSDP re-gather parameters for every micro-batch's forward and backward).
/// With the ring factor (N-1)/N: DDP and ZeRO-1/2 move 2 Psi, ZeRO-3 and FSDP full shard 3 Psi
/// (16-bit elements); FSDP hybrid shard keeps the 3 Psi inside the shard group and all-reduces
/// across groups, so the cross-host part is 2 M (W-1) / (G W) when a group is a host.
DataParallelTraffic data_parallel_traffic(const Scenario& scenario);

}  // namespace memtwin
