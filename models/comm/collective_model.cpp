#include "models/comm/collective_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "models/comm/nccl_tuning.h"

namespace memtwin {
namespace {

int ring_steps(Collective kind, int ranks) { return kind == Collective::all_reduce ? 2 * (ranks - 1) : ranks - 1; }

int inter_node_steps(Collective kind, int nodes) {
  if (nodes <= 1) return 0;
  return kind == Collective::all_reduce ? 2 * (nodes - 1) : nodes - 1;
}

}  // namespace

double bus_factor(Collective kind, int ranks) {
  const double n = ranks;
  switch (kind) {
    case Collective::all_reduce: return 2 * (n - 1) / n;
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::all_to_all: return (n - 1) / n;
    case Collective::p2p_forward:
    case Collective::p2p_backward: return 1;
  }
  return 1;
}

std::optional<Collective> parse_collective(const std::string& name) {
  for (Collective c : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce, Collective::all_to_all,
                       Collective::p2p_forward, Collective::p2p_backward}) {
    if (name == collective_name(c)) return c;
  }
  return std::nullopt;
}

CollectiveModel::CollectiveModel(const Cluster& cluster) : cluster_(cluster) {}

BytesPerSec CollectiveModel::usable_intra_node_bandwidth() const {
  return BytesPerSec(cluster_.intra_node.bandwidth.value() * cluster_.collectives.intra_node_efficiency);
}

BytesPerSec CollectiveModel::usable_nic_bandwidth() const {
  return BytesPerSec(cluster_.inter_node.nic_bandwidth.value() * cluster_.collectives.inter_node_efficiency);
}

BytesPerSec CollectiveModel::node_uplink_bandwidth() const {
  return BytesPerSec(cluster_.inter_node.nics_per_node * usable_nic_bandwidth().value() /
                     cluster_.inter_node.node_uplink_oversubscription());
}

BytesPerSec CollectiveModel::leaf_uplink_bandwidth(int leaf) const {
  const InterNodeFabric& fabric = cluster_.inter_node;
  const int members = std::min(fabric.nodes_per_leaf, cluster_.nodes - leaf * fabric.nodes_per_leaf);
  return BytesPerSec(members * fabric.nics_per_node * usable_nic_bandwidth().value() / fabric.oversubscription);
}

double CollectiveModel::inter_node_bandwidth(CollectiveGroup group) const {
  // A group with k ranks on a node uses their k rails (NICs), at most the node's NICs, and the
  // node's share of an oversubscribed fabric: its own uplink's (fat-tree), or its leaf's uplink to
  // the spine when the group spans more nodes than a leaf holds (leaf-spine; a group within a leaf's
  // nodes is taken to stay on it).
  const InterNodeFabric& fabric = cluster_.inter_node;
  const int rails = std::min(fabric.nics_per_node, std::max(1, group.ranks_per_node()));
  const bool oversubscribed = !fabric.leaf_spine() || group.nodes > fabric.nodes_per_leaf;
  return rails * usable_nic_bandwidth().value() / (oversubscribed ? fabric.oversubscription : 1.0);
}

const MeasuredCollective* CollectiveModel::measured_for(Collective kind, CollectiveGroup group) const {
  const MeasuredCollective* best = nullptr;
  double best_distance = std::numeric_limits<double>::max();
  for (const auto& m : cluster_.collectives.measured) {
    if (m.collective != collective_name(kind)) continue;
    // Crossing nodes or not changes the bandwidth most: the node count first, then the ranks.
    const double distance = 1e3 * std::abs(std::log(static_cast<double>(m.nodes) / group.nodes)) +
                            std::abs(std::log(static_cast<double>(m.ranks) / group.ranks));
    if (distance < best_distance) {
      best_distance = distance;
      best = &m;
    }
  }
  return best;
}

CollectiveCost CollectiveModel::cost(Collective kind, CollectiveGroup group, double bytes_total) const {
  CollectiveCost out = library_cost(kind, group, bytes_total);
  // A software stack that reaches only a fraction of that bandwidth (cluster.efficiency.collectives)
  // takes transfer / fraction in all; the rest is time its links stand idle, so it is latency
  // (the simulator sleeps it instead of putting more bytes on the links). Point-to-point sends
  // are not collectives and keep the links' time.
  const double reached = cluster_.efficiency.collectives;
  const bool p2p = kind == Collective::p2p_forward || kind == Collective::p2p_backward;
  if (reached < 1 && !p2p && out.transfer.value() > 0) {
    out.latency = Seconds(out.latency.value() + out.transfer.value() * (1 / reached - 1));
    char fraction[32];
    std::snprintf(fraction, sizeof fraction, "%.3g", reached);
    out.basis += std::string(" at ") + fraction + " of its bandwidth";
  }
  return out;
}

CollectiveCost CollectiveModel::library_cost(Collective kind, CollectiveGroup group, double bytes_total) const {
  CollectiveCost out;
  if (group.ranks < 2 || bytes_total <= 0) {
    out.basis = "none";
    return out;
  }
  const bool across = group.nodes > 1;
  if (kind == Collective::p2p_forward || kind == Collective::p2p_backward) {
    // One transfer: the wire latency, the slowest link on its path.
    const double bandwidth = across ? std::min(usable_nic_bandwidth().value(), node_uplink_bandwidth().value())
                                    : usable_intra_node_bandwidth().value();
    out.latency = across ? cluster_.inter_node.latency : cluster_.intra_node.latency;
    out.transfer = Seconds(bytes_total / bandwidth);
    out.basis = "p2p";
    return out;
  }
  if (const MeasuredCollective* m = measured_for(kind, group)) {
    // Measured: its bus bandwidth as it is, its latency per ring step times this group's steps.
    const double scale = kind == Collective::all_to_all
                             ? 1.0
                             : static_cast<double>(ring_steps(kind, group.ranks)) / ring_steps(kind, m->ranks);
    out.latency = Seconds(m->latency.value() * scale);
    out.transfer = Seconds(bytes_total * bus_factor(kind, group.ranks) / m->bus_bandwidth.value());
    out.basis = "measured (" + m->source + ")";
    return out;
  }
  if (kind == Collective::all_to_all) return all_to_all(group, bytes_total);
  const auto& settings = cluster_.collectives;
  if (settings.library == CollectiveLibrary::ring || !cluster_.gpu.generation ||
      *cluster_.gpu.generation == GpuGeneration::cpu) {
    return ring_library(kind, group, bytes_total);
  }
  nccl::Graph graph;
  graph.channels = settings.channels;
  graph.intra_gbps = usable_intra_node_bandwidth().value() / 1e9;
  graph.inter_gbps = inter_node_bandwidth(group) / 1e9;
  graph.nvlink = cluster_.intra_node.fabric != Fabric::pcie;
  graph.nvswitch = cluster_.intra_node.fabric == Fabric::nvswitch;
  graph.generation = *cluster_.gpu.generation;
  graph.net_overhead_us = settings.net_overhead.value() * 1e6;
  const auto candidates = nccl::choices(kind, group.ranks, group.nodes, graph, settings.algorithms, settings.protocols);
  if (candidates.empty()) {
    out = ring_library(kind, group, bytes_total);
    out.basis = "ring (no allowed NCCL algorithm applies to this group)";
    return out;
  }
  double best = std::numeric_limits<double>::max();
  for (const auto& c : candidates) {
    const double t = nccl::time_us(c, kind, group.ranks, group.nodes, graph, bytes_total);
    if (t < best) {
      best = t;
      const double transfer_us = bytes_total / (1000.0 * c.bandwidth_gbps);
      out.algorithm = c.algorithm;
      out.protocol = c.protocol;
      out.transfer = Seconds(transfer_us * 1e-6);
      out.latency = Seconds((t - transfer_us) * 1e-6);  // the size corrections count as latency
    }
  }
  const bool in_switch = out.algorithm == CollectiveAlgorithm::nvls || out.algorithm == CollectiveAlgorithm::nvls_tree;
  out.traffic_factor = in_switch && kind == Collective::all_reduce ? 0.5 : 1.0;
  out.basis = std::string("nccl ") + std::string(kCollectiveAlgorithmNames.name(out.algorithm)) + "/" +
              std::string(kCollectiveProtocolNames.name(out.protocol));
  return out;
}

CollectiveCost CollectiveModel::ring_library(Collective kind, CollectiveGroup group, double bytes_total) const {
  // A ring with one message latency per step; the slowest of the ranks' links and the group's NICs.
  CollectiveCost out;
  const int steps = ring_steps(kind, group.ranks);
  const int inter = inter_node_steps(kind, group.nodes);
  out.latency = Seconds((steps - inter) * cluster_.intra_node.latency.value() + inter * cluster_.inter_node.latency.value());
  double bus = group.ranks_per_node() > 1 ? usable_intra_node_bandwidth().value() : std::numeric_limits<double>::max();
  if (group.nodes > 1) bus = std::min(bus, inter_node_bandwidth(group));
  out.transfer = Seconds(bytes_total * bus_factor(kind, group.ranks) / bus);
  out.basis = "ring";
  return out;
}

CollectiveCost CollectiveModel::all_to_all(CollectiveGroup group, double bytes_total) const {
  // Grouped sends and receives to every member at once: one message latency; each rank's foreign
  // shares over NVLink (same node) and over its NIC and the node's uplink (other nodes).
  CollectiveCost out;
  const double n = group.ranks, local = group.ranks_per_node();
  out.latency = group.nodes > 1 ? cluster_.inter_node.latency : cluster_.intra_node.latency;
  double transfer = bytes_total * (local - 1) / n / usable_intra_node_bandwidth().value();
  if (group.nodes > 1) {
    const double per_rank = inter_node_bandwidth(group) / local;
    transfer = std::max(transfer, bytes_total * (n - local) / n / per_rank);
  }
  out.transfer = Seconds(transfer);
  out.basis = "all-to-all";
  return out;
}

}  // namespace memtwin
