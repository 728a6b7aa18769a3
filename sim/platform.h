#pragma once
// The SimGrid platform of a cluster: one host per GPU, one per node for its CPUs and DRAM.
//
//   node zone (full routing)                      fabric (star routing)
//   gpu_i --intra_i--+--intra_j-- gpu_j            node0 gw --uplink0--+
//   gpu_i --pcie_i--- cpu_n                        node1 gw --uplink1--+-- core
//   gpu_i --nic_k---- gw_n  (k = i mod NICs)       ...
//
// Every link is split-duplex (independent up and down directions). intra_i carries NVLink/NVSwitch
// (or PCIe peer) traffic at the per-GPU bandwidth; nic_k is one NIC; uplink_n is the node's share
// of the fabric: NICs x NIC bandwidth / oversubscription. Bandwidths are the usable ones the
// collective model gives (NCCL's per-link figures), latencies such that a message inside a node
// takes `intra_node.latency` and one between nodes `inter_node.latency`. With
// `inter_node.topology: leaf-spine` the node zones sit in leaf zones (star routing) of
// `nodes_per_leaf` nodes, their uplinks at the NICs' full bandwidth into the leaf switch, and each
// leaf reaches the spine over `leaf<k>.uplink`: its nodes' NICs x NIC bandwidth / oversubscription.
// Flows sharing a link share its bandwidth
// (SimGrid's max-min model), which is what makes contention visible. A node with NVMe has it as a
// SimGrid disk on its CPU host (read and write bandwidth per node, shared by all its GPUs' I/O).
#include <vector>

#include <simgrid/s4u.hpp>

#include "models/scenario.h"

namespace memtwin::sim {

struct Platform {
  std::vector<simgrid::s4u::Host*> gpus;  ///< by global rank
  std::vector<simgrid::s4u::SplitDuplexLink*> links;  ///< every link, node by node (intra, PCIe, NICs, uplink)
  std::vector<simgrid::s4u::Host*> cpus;  ///< by node
  std::vector<simgrid::s4u::Disk*> nvme;  ///< by node, on its CPU host; empty without `cluster.nvme`
  std::vector<int> node_of_gpu;
};

/// Builds the platform into the current engine's root. Call once, before Engine::run().
Platform build_platform(const Cluster& cluster);
/// The same where nodes differ in their GPUs (a disaggregated side on a GPU type of its own):
/// node n's GPU links (intra-node, PCIe) are those of nodes[n]; the NICs and the fabric are
/// `cluster`'s.
Platform build_platform(const Cluster& cluster, const std::vector<const Cluster*>& nodes);

}  // namespace memtwin::sim
