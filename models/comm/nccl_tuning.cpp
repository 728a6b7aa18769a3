#include "models/comm/nccl_tuning.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace memtwin::nccl {
namespace {

// NCCL's constant tables, indexed [algorithm][protocol] with algorithms in
// CollectiveAlgorithm's order (ring, tree, nvls, nvls_tree, pat) and protocols (ll, ll128, simple).
constexpr double kBaseLatencyUs[5][3] = {{6.6, 14.0, 8.4}, {6.8, 14.0, 8.4}, {0, 0, 0}, {0, 0, 0}, {8.0, 8.0, 8.0}};
// Per-step hardware latency: NVLink, PCIe, network.
constexpr double kNvlinkLatencyUs[5][3] = {{0.6, 1.9, 3.4}, {0.6, 1.25, 4.0}, {0, 0, 25}, {0, 0, 25}, {0, 0, 4.0}};
constexpr double kPcieLatencyUs[5][3] = {{1.0, 2.5, 5.7}, {1.0, 1.9, 4.0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 4.0}};
constexpr double kNetLatencyUs[5][3] = {{2.7, 4.0, 14.0}, {5.0, 8.5, 14.0}, {0, 0, 18}, {0, 0, 20.9}, {0, 0, 14}};
// By compute-capability class (volta, ampere, hopper, blackwell) and node count (1, 2, more).
// LL's ceiling: single node by GPU class; across nodes NCCL indexes by CPU vendor, and the
// first row is Intel's (AMD hosts get the second, lower one).
constexpr double kLlMaxGbps[4][3] = {{39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282.0, 90.0, 70.0}};
constexpr double kRingLl128PerChannelGbps[4][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 36.7}, {40, 40, 40}};
constexpr double kTreeLl128PerChannelGbps[4][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
constexpr double kTreePerChannelGbps[4][3] = {{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};
constexpr double kNvlsTreePerChannelGbps[4][3] = {{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {0, 57.7, 45.5}, {0, 96.0, 80.0}};
constexpr double kNvlsEfficiency[4] = {0, 0, 0.85, 0.74};
// Trees stray from the model at medium sizes; NCCL scales their bandwidth by these, by
// log2(bytes / 64) from 0 to 23.
constexpr double kTreeCorrection[3][24] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9}};

int class_index(GpuGeneration g) {
  switch (g) {
    case GpuGeneration::volta: return 0;
    case GpuGeneration::ampere:
    case GpuGeneration::ada: return 1;  // compute capability 8.x
    case GpuGeneration::hopper: return 2;
    case GpuGeneration::blackwell: return 3;
    case GpuGeneration::cpu: return 0;
  }
  return 0;
}

int log2_floor(double x) { return x >= 1 ? static_cast<int>(std::floor(std::log2(x))) : -1; }

template <class E>
bool allowed(const std::vector<E>& list, E e) {
  return list.empty() || std::find(list.begin(), list.end(), e) != list.end();
}

int steps(Collective kind, int ranks) { return kind == Collective::all_reduce ? 2 * (ranks - 1) : ranks - 1; }

}  // namespace

std::vector<Choice> choices(Collective kind, int ranks, int nodes, const Graph& g,
                            const std::vector<CollectiveAlgorithm>& allowed_algorithms,
                            const std::vector<CollectiveProtocol>& allowed_protocols) {
  std::vector<Choice> out;
  if (ranks < 2) return out;
  const bool all_reduce = kind == Collective::all_reduce;
  const bool gather_scatter = kind == Collective::all_gather || kind == Collective::reduce_scatter;
  if (!all_reduce && !gather_scatter) return out;
  const int cls = class_index(g.generation);
  const int by_nodes = nodes <= 2 ? nodes - 1 : 2;
  const double ppn = static_cast<double>(ranks) / nodes;
  const double ll_max = kLlMaxGbps[nodes == 1 ? cls : 0][by_nodes];
  const double channels = g.channels;
  // Per channel: a ring across nodes cannot go faster than the NICs it crosses.
  const double intra_ch = g.intra_gbps / channels;
  const double inter_ch = (nodes > 1 ? std::min(g.intra_gbps, g.inter_gbps) : g.intra_gbps) / channels;
  const int nsteps = steps(kind, ranks);
  const int inter_steps = nodes == 1 ? 0 : (all_reduce ? 2 * (nodes - 1) : nodes - 1);
  const auto& intra_table = g.nvlink ? kNvlinkLatencyUs : kPcieLatencyUs;

  for (CollectiveAlgorithm a : {CollectiveAlgorithm::ring, CollectiveAlgorithm::tree, CollectiveAlgorithm::nvls,
                                CollectiveAlgorithm::nvls_tree, CollectiveAlgorithm::pat}) {
    if (!allowed(allowed_algorithms, a)) continue;
    const bool nvls_family = a == CollectiveAlgorithm::nvls || a == CollectiveAlgorithm::nvls_tree;
    // Which algorithms NCCL runs for which collective, and where.
    if (a == CollectiveAlgorithm::tree && !all_reduce) continue;
    if (a == CollectiveAlgorithm::nvls_tree && (!all_reduce || nodes == 1)) continue;
    if (a == CollectiveAlgorithm::pat && (!gather_scatter || nodes != ranks)) continue;  // one GPU per node
    // NVLS needs NVSwitch multicast (Hopper on); across nodes NCCL runs it for all-reduce only with
    // CollNet, which is not modelled, and never for all-gather / reduce-scatter without it.
    if (nvls_family && (!g.nvswitch || !g.nvlink || cls < 2 || g.channels < 2)) continue;
    if (a == CollectiveAlgorithm::nvls && nodes > 1) continue;
    const int ai = static_cast<int>(a);
    for (CollectiveProtocol p : {CollectiveProtocol::ll, CollectiveProtocol::ll128, CollectiveProtocol::simple}) {
      if (!allowed(allowed_protocols, p)) continue;
      if ((nvls_family || a == CollectiveAlgorithm::pat) && p != CollectiveProtocol::simple) continue;
      // LL128 only where every intra-node hop is NVLink.
      if (p == CollectiveProtocol::ll128 && !g.nvlink) continue;
      const int pi = static_cast<int>(p);

      // (NCCL takes the graph's intra-node speed up to two nodes; its search has already held that
      // to what the NICs carry, which inter_ch states directly.)
      double bw = nodes > 1 ? inter_ch : intra_ch;
      if (nvls_family) {
        double intra = intra_ch * kNvlsEfficiency[cls] * (channels - 1) / channels;
        intra *= all_reduce ? 2.0 : (ppn - 1) / ppn;
        const double inter = (nodes > 1 ? g.inter_gbps / channels : std::numeric_limits<double>::max()) *
                             (nodes <= 2 && a == CollectiveAlgorithm::nvls_tree ? 2 : 1);
        bw = std::min({intra, inter,
                       a == CollectiveAlgorithm::nvls_tree ? kNvlsTreePerChannelGbps[cls][by_nodes]
                                                           : std::numeric_limits<double>::max()});
      }
      double bus = channels * bw;
      if (a == CollectiveAlgorithm::ring && p == CollectiveProtocol::ll) bus = std::min(ll_max, bus * 0.5);
      if (a == CollectiveAlgorithm::ring && p == CollectiveProtocol::ll128)
        bus = std::min(bus * 0.92, channels * kRingLl128PerChannelGbps[cls][by_nodes]);
      if (a == CollectiveAlgorithm::tree) bus = std::min(bus * 0.92, channels * kTreePerChannelGbps[cls][by_nodes]);
      if (a == CollectiveAlgorithm::tree && p == CollectiveProtocol::ll) bus = std::min(bus / 3.8, ll_max);
      if (a == CollectiveAlgorithm::tree && p == CollectiveProtocol::ll128)
        bus = std::min(bus * (nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0), channels * kTreeLl128PerChannelGbps[cls][by_nodes]);
      if (a == CollectiveAlgorithm::pat) bus *= 0.75;
      // Bus bandwidth to the bandwidth NCCL divides the buffer by (gathers by NVLS and PAT keep it).
      if (!(a != CollectiveAlgorithm::ring && gather_scatter)) {
        bus *= (a == CollectiveAlgorithm::tree) ? 0.5 : static_cast<double>(ranks) / nsteps;
      }
      if (!(bus > 0)) continue;

      double intra_lat = intra_table[ai][pi];
      // With one rank per node every step is a network step, at the tree's latency.
      double inter_lat = ppn == 1 ? kNetLatencyUs[1][pi] : kNetLatencyUs[ai][pi];
      double latency = kBaseLatencyUs[ai][pi];
      switch (a) {
        case CollectiveAlgorithm::ring: {
          // Inter-node rings still post every step to the network.
          if (nodes > 1) intra_lat = std::max(intra_lat, g.net_overhead_us * (p == CollectiveProtocol::simple ? 3 : 1));
          latency += (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat;
          break;
        }
        case CollectiveAlgorithm::tree:
          latency += 2 * ((ppn - 1) * intra_lat + std::max(0, log2_floor(nodes)) * inter_lat);
          break;
        case CollectiveAlgorithm::nvls:
          latency = intra_lat + (nodes > 1 ? inter_lat : 0);
          break;
        case CollectiveAlgorithm::nvls_tree:
          latency += intra_lat + 2 * std::max(0, log2_floor(nodes)) * inter_lat;
          break;
        case CollectiveAlgorithm::pat:
          latency += std::max(0, log2_floor(nodes)) * (inter_lat / 3.5) + ranks * 2.8;
          break;
      }
      out.push_back({a, p, latency, bus});
    }
  }
  return out;
}

double time_us(const Choice& c, Collective kind, int ranks, int nodes, const Graph& g, double bytes) {
  double bw = c.bandwidth_gbps;
  double latency = c.latency_us;
  const int log_size = log2_floor(bytes / 64);
  if (c.algorithm == CollectiveAlgorithm::tree && kind == Collective::all_reduce && log_size >= 0 && log_size < 23) {
    bw *= kTreeCorrection[static_cast<int>(c.protocol)][log_size];
  }
  // The ring's plateau: a multi-node Simple all-reduce whose per-channel, per-rank piece is not tiny.
  if (c.algorithm == CollectiveAlgorithm::ring && c.protocol == CollectiveProtocol::simple && nodes > 1 &&
      kind == Collective::all_reduce && bytes / (static_cast<double>(g.channels) * ranks) >= 64) {
    latency *= class_index(g.generation) == 0 ? 1.9 : 1.4;
  }
  return latency + bytes / (1000.0 * bw);
}

}  // namespace memtwin::nccl
