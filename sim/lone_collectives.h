#pragma once
// Which of a collective's flows can stand for all of them, ending at the same instants.
//
// Why it holds: SimGrid's max-min sharing (CM02, no cross-traffic, no TCP window) shares each link
// direction among the flows crossing it and nothing else. Flows that share no link direction,
// directly or through others, do not affect each other's rates. Group a collective's flows into
// such components: in a component where every flow has the same shape - its bytes, its route's
// latency, and along its route each link's bandwidth with the number of flows sharing it - every
// flow has a link whose share, bandwidth / flows, is the component's narrowest, so max-min gives
// every flow that share at once and they all end together. Two components of the same shape and
// size then end at the same instant, and one of them stands for the other. All of this holds only
// while nothing else crosses those links, which this class decides before the simulation starts,
// from every route the step's collectives and copies will take: a communicator (a role's group) is
// alone on its links when no other communicator's flow and no copy crosses any link direction its
// own flows cross, and its collectives never overlap one another (every member runs them on one
// stream, and a collective ends for all of its members at once).
//
// Why it matters: a tensor-parallel ring filling a node is 8 flows on links nothing else uses, each
// its own component, one of which stands for all; a rail-aligned ring over 128 nodes of 8 GPUs is
// 2,048 flows, of which one node's 8 NIC flows (sharing their uplinks) and one NVLink flow stand for
// the rest. The SimGrid transfers fall by as much, the results do not move.
//
// Usage: add() every route of every communicator (and of the copies, as kNeverAlone), call
// on_several_streams() for the communicators whose members run them on more than one stream, then
// ask stand_ins() for each collective's flows.
#include <cstddef>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <simgrid/s4u.hpp>

#include "sim/collectives.h"

namespace memtwin::sim {

class LoneCollectives {
 public:
  /// Traffic that never runs as one flow and shares its links with nobody's that does (copies).
  static constexpr int kNeverAlone = -1;

  /// `gpus[slot]`: the hosts the flows' src and dst (platform slots) name; outlives this object.
  explicit LoneCollectives(const std::vector<simgrid::s4u::Host*>& gpus) : gpus_(gpus) {}

  /// Records that `communicator` (an id >= 0, or kNeverAlone) sends over the route from `src` to
  /// `dst` (hosts of the platform: GPUs by slot, or a node's CPU for copies).
  void add(int communicator, const simgrid::s4u::Host* src, const simgrid::s4u::Host* dst);
  /// Records that some member runs `communicator`'s collectives on more than one stream: two of them
  /// may then be in flight together, so it is never alone.
  void on_several_streams(int communicator) { several_streams_.insert(communicator); }

  /// Where `communicator` is alone on its links, the flows (indices into `flows`: one collective's
  /// on platform slots, all added before) that end when all of `flows` would; nullopt where that
  /// is all of them. Flows sharing a link direction, transitively, form a component; a component
  /// whose flows all have one shape - bytes, route latency, and each link's bandwidth with the
  /// number of flows sharing it - gives each the same rate and ends as one, so of components alike
  /// in shape and size the first stands for the others. Components of mixed shapes run whole.
  [[nodiscard]] std::optional<std::vector<std::size_t>> stand_ins(int communicator, const std::vector<Flow>& flows) const;

 private:
  struct Route {
    std::vector<const simgrid::s4u::Link*> links;  ///< each direction crossed
    std::vector<double> bandwidths;                ///< of those links
    double latency = 0;
  };
  static constexpr int kShared = -2;  ///< a link direction crossed by two communicators' traffic

  const Route& route(const simgrid::s4u::Host* src, const simgrid::s4u::Host* dst);
  [[nodiscard]] const Route* known_route(const simgrid::s4u::Host* src, const simgrid::s4u::Host* dst) const;
  [[nodiscard]] bool alone(int communicator) const;

  const std::vector<simgrid::s4u::Host*>& gpus_;
  std::map<std::pair<const simgrid::s4u::Host*, const simgrid::s4u::Host*>, Route> routes_;
  std::unordered_map<const simgrid::s4u::Link*, int> user_of_link_;  ///< a communicator, or kShared
  std::unordered_map<int, std::unordered_set<const simgrid::s4u::Link*>> links_of_;  ///< by communicator
  std::unordered_set<int> several_streams_;
};

}  // namespace memtwin::sim
