#pragma once
// The one collective cost model. The analytic backend evaluates it, the simulator turns it into
// flows that contend on the platform (sim/collectives.cpp), serving's tensor-parallel all-reduces
// use it (models/serving/iteration_cost.cpp); no other layer prices a collective.
//
// For GPUs it is NCCL's own tuning model (src/graph/tuning.cc of NVIDIA/nccl): for every
// algorithm (ring, tree, NVLS, NVLS-tree, PAT) and protocol (LL, LL128, Simple) a latency (a base
// plus a per-step cost, intra-node and inter-node steps priced apart) and a bandwidth (the
// channels' bandwidth, protocol efficiencies and per-channel caps), then the fastest choice for
// the message, as NCCL picks it per call. The message-size curve is what latency + size /
// bandwidth gives, with NCCL's own size corrections. The channels' bandwidth is derived from the
// links the platform has (usable fraction of NVLink/PCIe and of the NICs, as NCCL's topology
// search sees them). A collective measured on the user's cluster (nccl-tests, fitted by
// `memtwin calibrate --nccl-tests`) replaces the model for its kind and group. On the host device
// (MPI) and for GPUs of no known generation the library is a plain ring: one link latency per step.
// docs/collectives.md gives every constant's source.
#include <optional>
#include <string>

#include "models/plan/plan.h"
#include "models/scenario.h"

namespace memtwin {

/// The ranks of one communicator: `ranks` spread evenly over `nodes`.
struct CollectiveGroup {
  int ranks = 1;
  int nodes = 1;
  [[nodiscard]] int ranks_per_node() const { return ranks / nodes; }
};

struct CollectiveCost {
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring;
  CollectiveProtocol protocol = CollectiveProtocol::simple;
  Seconds latency;                  ///< the size-independent part
  Seconds transfer;                 ///< the bytes' part: bytes_total / algorithm bandwidth
  std::string basis;                ///< "nccl ring/simple", "ring", "measured: ..."
  /// The links' traffic as a fraction of a ring's (NVLS reduces inside the switch: half).
  double traffic_factor = 1.0;
  [[nodiscard]] Seconds time() const { return Seconds(latency.value() + transfer.value()); }
};

/// nccl-tests' bus factor (doc/PERFORMANCE.md): busbw = algbw x factor, with algbw = the full
/// buffer / time. all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n; p2p 1.
double bus_factor(Collective kind, int ranks);

/// Parses "all_reduce" etc. (collective_name's spelling); empty when unknown.
std::optional<Collective> parse_collective(const std::string& name);

class CollectiveModel {
 public:
  explicit CollectiveModel(const Cluster& cluster);

  /// The time of one collective of `bytes_total` (nccl-tests' size: the gathered output, the
  /// reduce-scatter input, the all-reduce buffer, one member's all-to-all buffer) over `group`, alone
  /// on idle links, at `cluster.efficiency.collectives` of the bandwidth. p2p kinds: one transfer
  /// between two ranks.
  [[nodiscard]] CollectiveCost cost(Collective kind, CollectiveGroup group, double bytes_total) const;

  /// The link bandwidths collectives can use (per direction): the platform builds its links with
  /// them, so contention in the simulator shares what NCCL can reach, not the datasheet figure.
  [[nodiscard]] BytesPerSec usable_intra_node_bandwidth() const;  ///< per GPU
  [[nodiscard]] BytesPerSec usable_nic_bandwidth() const;         ///< per NIC
  /// A node's uplink into the fabric: its NICs, over the oversubscription unless a leaf-spine
  /// fabric's leaves take it.
  [[nodiscard]] BytesPerSec node_uplink_bandwidth() const;
  /// A leaf-spine leaf's uplink to the spine: its nodes' NICs over the oversubscription (the last
  /// leaf may hold fewer nodes).
  [[nodiscard]] BytesPerSec leaf_uplink_bandwidth(int leaf) const;

 private:
  /// cost() before the stack's collective efficiency: NCCL's model, a measurement or the ring.
  [[nodiscard]] CollectiveCost library_cost(Collective kind, CollectiveGroup group, double bytes_total) const;
  [[nodiscard]] const MeasuredCollective* measured_for(Collective kind, CollectiveGroup group) const;
  [[nodiscard]] CollectiveCost ring_library(Collective kind, CollectiveGroup group, double bytes_total) const;
  [[nodiscard]] CollectiveCost all_to_all(CollectiveGroup group, double bytes_total) const;
  [[nodiscard]] double inter_node_bandwidth(CollectiveGroup group) const;  ///< B/s per node for this group

  const Cluster& cluster_;
};

}  // namespace memtwin
