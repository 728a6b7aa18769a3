#include "sim/collectives.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "models/comm/collective_model.h"
#include "sim/one_simcall.h"

namespace memtwin::sim {

namespace sg4 = simgrid::s4u;

namespace {

// How long each of `flows`, started together on otherwise idle links, takes without its route's
// latency: at its route's narrowest link divided among the flows crossing it in the same direction
// (the platform's links: a GPU's intra-node link, its NIC (GPU index mod NICs), its node's uplink).
std::vector<double> idle_transfer_seconds(const std::vector<Flow>& flows, const std::vector<int>& node_of_gpu,
                                          const Cluster& c) {
  const CollectiveModel model(c);
  const double intra_bw = model.usable_intra_node_bandwidth().value();
  const double nic_bw = model.usable_nic_bandwidth().value();
  const double uplink_bw = model.node_uplink_bandwidth().value();
  const int nics = c.inter_node.nics_per_node;
  // Flows crossing each link, by direction: [0] leaving, [1] arriving. Keyed by the links the flows
  // touch (not sized by the cluster), so a collective costs its flows, not its cluster's GPUs.
  std::unordered_map<std::size_t, int> intra[2], nic[2], uplink[2], leaf_uplink[2];
  auto leaf_of = [&](int gpu) { return static_cast<std::size_t>(c.inter_node.leaf_of(node_of_gpu[gpu])); };
  auto leaf_uplink_bw = [&](std::size_t leaf) { return model.leaf_uplink_bandwidth(static_cast<int>(leaf)).value(); };
  auto nic_of = [&](int gpu) { return static_cast<std::size_t>(node_of_gpu[gpu]) * nics + gpu % c.gpus_per_node % nics; };
  auto node_of = [&](int gpu) { return static_cast<std::size_t>(node_of_gpu[gpu]); };
  auto gpu_key = [](int gpu) { return static_cast<std::size_t>(gpu); };
  for (const auto& f : flows) {
    if (f.bytes <= 0) continue;
    if (node_of_gpu[f.src] == node_of_gpu[f.dst]) {
      ++intra[0][gpu_key(f.src)], ++intra[1][gpu_key(f.dst)];
    } else {
      ++nic[0][nic_of(f.src)], ++nic[1][nic_of(f.dst)];
      ++uplink[0][node_of(f.src)], ++uplink[1][node_of(f.dst)];
      if (c.inter_node.leaf_spine() && leaf_of(f.src) != leaf_of(f.dst)) ++leaf_uplink[0][leaf_of(f.src)], ++leaf_uplink[1][leaf_of(f.dst)];
    }
  }
  std::vector<double> seconds;
  seconds.reserve(flows.size());
  for (const auto& f : flows) {
    if (f.bytes <= 0) {
      seconds.push_back(0.0);
      continue;
    }
    double rate = 0;
    if (node_of_gpu[f.src] == node_of_gpu[f.dst]) {
      rate = intra_bw / std::max(intra[0][gpu_key(f.src)], intra[1][gpu_key(f.dst)]);
    } else {
      rate = std::min(nic_bw / std::max(nic[0][nic_of(f.src)], nic[1][nic_of(f.dst)]),
                      uplink_bw / std::max(uplink[0][node_of(f.src)], uplink[1][node_of(f.dst)]));
      if (c.inter_node.leaf_spine() && leaf_of(f.src) != leaf_of(f.dst)) {
        rate = std::min({rate, leaf_uplink_bw(leaf_of(f.src)) / leaf_uplink[0][leaf_of(f.src)],
                         leaf_uplink_bw(leaf_of(f.dst)) / leaf_uplink[1][leaf_of(f.dst)]});
      }
    }
    seconds.push_back(f.bytes / rate);
  }
  return seconds;
}

// The ring's flows (NCCL's rings, flat over the group's ranks): every rank sends its successor what
// the ring moves, `per_rank` in all. Across nodes the rings are rail-aligned (local index j of node
// a sends to local index j of node a+1) and each channel's ring crosses every node once, so a rank
// sends 1/local of its bytes over its NIC and the rest over NVLink to its neighbour.
void add_ring_flows(CollectivePlan& out, const std::map<int, std::vector<int>>& by_node, const std::vector<int>& ranks,
                    double per_rank) {
  const int n = static_cast<int>(ranks.size());
  if (by_node.size() == 1) {
    for (int i = 0; i < n; ++i) out.flows.push_back({ranks[i], ranks[(i + 1) % n], per_rank});
    return;
  }
  std::vector<std::vector<int>> node_ranks;
  for (const auto& [node, rs] : by_node) node_ranks.push_back(rs);
  const int nodes = static_cast<int>(node_ranks.size());
  const int local = static_cast<int>(node_ranks.front().size());
  if (std::any_of(node_ranks.begin(), node_ranks.end(), [&](const std::vector<int>& rs) { return static_cast<int>(rs.size()) != local; })) {
    // Nodes holding unequal shares of the group (a hybrid-shard group of 6 over nodes of 4) have
    // no rails to align: one ring through every rank in node order, crossing into each node once.
    std::vector<int> ring;
    for (const auto& rs : node_ranks) ring.insert(ring.end(), rs.begin(), rs.end());
    for (int i = 0; i < n; ++i) out.flows.push_back({ring[i], ring[(i + 1) % n], per_rank});
    return;
  }
  const double inter = per_rank / local;
  const double intra = per_rank - inter;
  for (int a = 0; a < nodes; ++a) {
    const auto& here = node_ranks[a];
    const auto& next = node_ranks[(a + 1) % nodes];
    for (int j = 0; j < local && j < static_cast<int>(next.size()); ++j) {
      out.flows.push_back({here[j], next[j], inter});
      if (local > 1 && intra > 0) out.flows.push_back({here[j], here[(j + 1) % local], intra});
    }
  }
}

// Makes the flows take the model's time on idle links. SimGrid 3.32 ignores a host-to-host comm's
// rate, so the transfer is reached by what the flows carry: their bytes scaled until, alone on the
// links, they take the model's transfer time. What the scaling adds stands for what occupies the
// links besides the payload (LL's flag words, LL128's 8 of 128 bytes) and for what holds a
// protocol below the links (channel caps); where the links are the bound the scale is 1. The
// latency left after the last flow's own route latency is slept. Sharing with other traffic then
// slows the collective as SimGrid shares the links.
void fit_to_model(CollectivePlan& out, const CollectiveCost& cost, int calls, const std::vector<int>& node_of_gpu,
                  const Cluster& cluster) {
  const std::vector<double> idle = idle_transfer_seconds(out.flows, node_of_gpu, cluster);
  const double slowest = idle.empty() ? 0.0 : *std::max_element(idle.begin(), idle.end());
  const double transfer = cost.transfer.value() * calls;
  const double scale = slowest > 0 ? std::max(1.0, transfer / slowest) : 1.0;
  double end = 0;
  for (std::size_t i = 0; i < out.flows.size(); ++i) {
    auto& f = out.flows[i];
    f.bytes *= scale;
    if (f.bytes <= 0) continue;
    const bool across = node_of_gpu[f.src] != node_of_gpu[f.dst];
    const double route = across ? cluster.inter_node.latency.value() : cluster.intra_node.latency.value();
    end = std::max(end, route + idle[i] * scale);
  }
  out.latency_s = std::max(0.0, calls * cost.latency.value() + std::max(transfer, slowest * scale) - end);
}

}  // namespace

std::vector<int> node_of_each_rank(int ranks, const Cluster& cluster) {
  std::vector<int> node(static_cast<std::size_t>(std::max(ranks, 0)));
  for (int r = 0; r < ranks; ++r) node[static_cast<std::size_t>(r)] = r / cluster.gpus_per_node;
  return node;
}

CollectivePlan plan_collective(Collective kind, const std::vector<int>& ranks, double bytes_total,
                               const std::vector<int>& node_of_gpu, const Cluster& cluster, int calls) {
  CollectivePlan out;
  const int n = static_cast<int>(ranks.size());
  if (n < 2) return out;
  if (kind == Collective::p2p_forward || kind == Collective::p2p_backward) {
    const bool forward = kind == Collective::p2p_forward;
    out.flows.push_back({forward ? ranks[0] : ranks[1], forward ? ranks[1] : ranks[0], bytes_total * calls});
    out.bytes_per_rank = bytes_total * calls;
    return out;
  }
  std::map<int, std::vector<int>> by_node;  // ranks by node, in ring order
  for (int r : ranks) by_node[node_of_gpu[r]].push_back(r);
  const int nodes = static_cast<int>(by_node.size());
  const CollectiveCost cost = CollectiveModel(cluster).cost(kind, {n, nodes}, bytes_total);
  if (kind == Collective::all_to_all) {
    // Every member sends its buffer's n-1 foreign shares at once (NCCL's grouped send/recv): O(n^2)
    // flows, for the small groups expert parallelism uses.
    const double share = bytes_total / n * calls;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        if (i != j) out.flows.push_back({ranks[i], ranks[j], share});
    out.bytes_per_rank = share * (n - 1);
  } else {
    out.bytes_per_rank = bytes_total * calls * bus_factor(kind, n);
    add_ring_flows(out, by_node, ranks, out.bytes_per_rank * cost.traffic_factor);
  }
  fit_to_model(out, cost, calls, node_of_gpu, cluster);
  return out;
}

void run_collective(const CollectivePlan& plan, const Platform& platform) { run_collectives({&plan, 1}, platform); }

void run_collectives(std::span<const CollectivePlan> plans, const Platform& platform) {
  std::vector<sg4::CommPtr> comms;
  double latency = 0;
  in_one_simcall([&] {  // a host-to-host transfer has no owner actor
    for (const CollectivePlan& plan : plans) {
      for (const auto& f : plan.flows) {
        if (f.bytes <= 0) continue;
        comms.push_back(sg4::Comm::sendto_async(platform.gpus[f.src], platform.gpus[f.dst], static_cast<uint64_t>(f.bytes)));
      }
      latency = std::max(latency, plan.latency_s);
    }
  });
  // Waits for the first transfer still moving; those that ended by then (often all: the flows of a
  // collective on idle links end together) are collected in one simcall, not one wait each. A
  // host-to-host transfer is on no actor's list of activities, so a test releases it as a wait
  // would (a mailbox transfer tested, not waited for, would stay on its actors' lists).
  for (std::size_t next = 0; next < comms.size();) {
    comms[next++]->wait();
    in_one_simcall([&] {
      while (next < comms.size() && comms[next]->test()) ++next;
    });
  }
  if (latency > 0) sg4::this_actor::sleep_for(latency);
}

MemberFlows::MemberFlows(const CollectivePlan& plan, const std::vector<int>& member_slots) {
  // Below this many flows the global list stays short, and one actor issuing them all costs fewer
  // context switches than every member posting its own (the 16K-GPU example's 8-GPU tensor-parallel
  // all-reduces ran 1.0 s launched, 1.5 s by member; the 1,024-GPU step's 2,048-flow gathers 2.8 s
  // launched, 2.4 s by member, on the development VM).
  constexpr std::size_t kFewestFlows = 64;
  if (plan.flows.size() < kFewestFlows) return;
  int slots = 0;
  for (int s : member_slots) slots = std::max(slots, s + 1);
  std::vector<char> member(static_cast<std::size_t>(slots), 0);
  for (int s : member_slots) member[static_cast<std::size_t>(s)] = 1;
  auto is_member = [&](int s) { return s >= 0 && s < slots && member[static_cast<std::size_t>(s)]; };
  sends_.resize(static_cast<std::size_t>(slots));
  receives_.assign(static_cast<std::size_t>(slots), 0);
  for (const Flow& f : plan.flows) {
    if (f.bytes <= 0) continue;
    if (!is_member(f.src) || !is_member(f.dst)) {
      sends_.clear();
      receives_.clear();
      return;
    }
    sends_[static_cast<std::size_t>(f.src)].push_back({f.dst, static_cast<std::uint64_t>(f.bytes)});
    ++receives_[static_cast<std::size_t>(f.dst)];
  }
  usable_ = true;
}

void MemberFlows::make_transfers(int slot, const std::vector<sg4::Mailbox*>& inbox, std::vector<sg4::CommPtr>& transfers) const {
  // Mailboxes carry a pointer; the simulated size is what counts. Every receive lands in one place.
  static char payload;
  static void* landing;
  const auto index = static_cast<std::size_t>(slot);
  if (index >= sends_.size()) return;
  for (const Send& s : sends_[index]) transfers.push_back(inbox[static_cast<std::size_t>(s.dst)]->put_init(&payload, s.bytes));
  for (int r = 0; r < receives_[index]; ++r) transfers.push_back(inbox[index]->get_init()->set_dst_data(&landing, sizeof(void*)));
}

}  // namespace memtwin::sim
