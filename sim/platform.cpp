#include "sim/platform.h"

#include <map>
#include <string>

#include "models/comm/collective_model.h"

namespace memtwin::sim {

namespace sg4 = simgrid::s4u;
using Dir = sg4::LinkInRoute::Direction;

Platform build_platform(const Cluster& c) { return build_platform(c, std::vector<const Cluster*>(static_cast<std::size_t>(c.nodes), &c)); }

Platform build_platform(const Cluster& c, const std::vector<const Cluster*>& nodes) {
  Platform p;
  auto* fabric = sg4::create_star_zone("fabric");
  // Links carry what collectives can reach on them (the collective model's usable bandwidths).
  const CollectiveModel model(c);
  const double nic_bw = model.usable_nic_bandwidth().value();
  const double uplink_bw = model.node_uplink_bandwidth().value();
  // A message between nodes crosses two NICs and two uplinks: a quarter of the latency each. (A
  // leaf's uplinks to the spine add none: inter_node.latency is the whole fabric's.)
  const double hop_latency = c.inter_node.latency.value() / 4;
  // Leaf-spine: each leaf a star zone of its nodes under the fabric's, its uplink carrying its
  // nodes' NICs over the oversubscription.
  std::vector<sg4::NetZone*> leaves;
  if (c.inter_node.leaf_spine()) {
    for (int n = 0; n < c.nodes; n += c.inter_node.nodes_per_leaf) {
      const int leaf = c.inter_node.leaf_of(n);
      auto* zone = sg4::create_star_zone("leaf" + std::to_string(leaf));
      zone->set_parent(fabric);
      // The leaf switch: a zone of its own holding the leaf's gateway router (SimGrid routes to a
      // zone's gateway through one of its child zones), reached through no link of the leaf.
      auto* sw = sg4::create_full_zone("leaf" + std::to_string(leaf) + ".switch");
      sw->set_parent(zone);
      auto* gateway = sw->create_router("leaf" + std::to_string(leaf) + ".gw");
      sw->seal();
      zone->add_route(sw->get_netpoint(), nullptr, gateway, nullptr, {}, true);
      leaves.push_back(zone);
      auto* up = fabric->create_split_duplex_link("leaf" + std::to_string(leaf) + ".uplink",
                                                  model.leaf_uplink_bandwidth(leaf).value());
      up->set_latency(0);
      p.links.push_back(up);
      fabric->add_route(zone->get_netpoint(), nullptr, gateway, nullptr, {{up, Dir::UP}}, false);
      fabric->add_route(nullptr, zone->get_netpoint(), nullptr, gateway, {{up, Dir::DOWN}}, false);
    }
  }
  std::map<const Cluster*, double> intra_bw_of;  // each kind of node's usable intra-node bandwidth
  for (int n = 0; n < c.nodes; ++n) {
    const Cluster& kind = *nodes.at(static_cast<std::size_t>(n));
    auto known = intra_bw_of.find(&kind);
    if (known == intra_bw_of.end()) known = intra_bw_of.emplace(&kind, CollectiveModel(kind).usable_intra_node_bandwidth().value()).first;
    const double intra_bw = known->second;
    const std::string node = "node" + std::to_string(n);
    auto* zone = sg4::create_full_zone(node);
    sg4::NetZone* parent = leaves.empty() ? fabric : leaves[static_cast<std::size_t>(c.inter_node.leaf_of(n))];
    zone->set_parent(parent);
    auto* gateway = zone->create_router(node + ".gw");
    auto* cpu = zone->create_host(node + ".cpu", 1e9);
    p.cpus.push_back(cpu);
    if (c.nvme) {
      p.nvme.push_back(cpu->create_disk(node + ".nvme", c.nvme->read_bandwidth.value(), c.nvme->write_bandwidth.value()));
      p.nvme.back()->seal();
    }
    std::vector<sg4::SplitDuplexLink*> nics;
    for (int k = 0; k < c.inter_node.nics_per_node; ++k) {
      auto* nic = zone->create_split_duplex_link(node + ".nic" + std::to_string(k), nic_bw);
      nic->set_latency(hop_latency);
      nics.push_back(nic);
      p.links.push_back(nic);
    }
    std::vector<sg4::Host*> gpus;
    std::vector<sg4::SplitDuplexLink*> intra, pcie;
    for (int g = 0; g < c.gpus_per_node; ++g) {
      const std::string name = node + ".gpu" + std::to_string(g);
      gpus.push_back(zone->create_host(name, 1e9));
      auto* l = zone->create_split_duplex_link(name + ".intra", intra_bw);
      l->set_latency(kind.intra_node.latency.value() / 2);
      intra.push_back(l);
      p.links.push_back(l);
      auto* pl = zone->create_split_duplex_link(name + ".pcie", kind.host.pcie_bandwidth.value());
      pl->set_latency(1e-6);
      pcie.push_back(pl);
      p.links.push_back(pl);
      p.gpus.push_back(gpus.back());
      p.node_of_gpu.push_back(n);
    }
    for (int i = 0; i < c.gpus_per_node; ++i) {
      for (int j = 0; j < c.gpus_per_node; ++j) {
        if (i == j) continue;
        zone->add_route(gpus[i]->get_netpoint(), gpus[j]->get_netpoint(), nullptr, nullptr,
                        {{intra[i], Dir::UP}, {intra[j], Dir::DOWN}}, false);
      }
      zone->add_route(gpus[i]->get_netpoint(), cpu->get_netpoint(), nullptr, nullptr, {{pcie[i], Dir::UP}}, false);
      zone->add_route(cpu->get_netpoint(), gpus[i]->get_netpoint(), nullptr, nullptr, {{pcie[i], Dir::DOWN}}, false);
      auto* nic = nics[i % nics.size()];
      zone->add_route(gpus[i]->get_netpoint(), gateway, nullptr, nullptr, {{nic, Dir::UP}}, false);
      zone->add_route(gateway, gpus[i]->get_netpoint(), nullptr, nullptr, {{nic, Dir::DOWN}}, false);
    }
    zone->seal();
    auto* uplink = parent->create_split_duplex_link(node + ".uplink", uplink_bw);
    uplink->set_latency(hop_latency);
    p.links.push_back(uplink);
    parent->add_route(zone->get_netpoint(), nullptr, gateway, nullptr, {{uplink, Dir::UP}}, false);
    parent->add_route(nullptr, zone->get_netpoint(), nullptr, gateway, {{uplink, Dir::DOWN}}, false);
  }
  for (auto* leaf : leaves) leaf->seal();
  fabric->seal();
  return p;
}

}  // namespace memtwin::sim
