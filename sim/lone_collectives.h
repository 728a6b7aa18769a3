#pragma once
// Which collectives can run as one of their flows and end at the same instant.
//
// Why it holds: SimGrid's max-min sharing (CM02, no cross-traffic, no TCP window) gives a flow that
// is alone on its links the whole of its route's narrowest link, whatever runs on other links. A
// collective whose flows carry equal bytes over routes of equal bandwidths and latency, no two of
// them crossing the same link direction, therefore ends when any one of its flows would end alone -
// provided nothing else crosses those links while it runs. That proviso is what this class decides,
// before the simulation starts, from every route the step's collectives and copies will take: a
// communicator (a role's group) is alone on its links when no other communicator's flow and no copy
// crosses any link direction its own flows cross, and its collectives never overlap one another
// (every member runs them on one stream, and a collective ends for all its members at once).
//
// Why it matters: a tensor-parallel group's ring inside a node is 8 flows per collective on links
// nothing else uses; a 16,384-GPU step simulates 48,000 of them. One flow each is a sixth of the
// SimGrid transfers for the same times.
//
// Usage: add() every route of every communicator (and of the copies, as kNeverAlone), call
// on_several_streams() for the communicators whose members run them on more than one stream, then
// ask stand_in() for each collective's flows.
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
  void on_several_streams(int communicator) { several_streams_.push_back(communicator); }

  /// Where `communicator` is alone on its links and `flows` (slots; one collective's, all added
  /// before) are alike - equal positive bytes, routes of equal bandwidths and latency, no link
  /// direction crossed twice - the index of the flow that ends when all of them would; else nullopt.
  [[nodiscard]] std::optional<std::size_t> stand_in(int communicator, const std::vector<Flow>& flows) const;

 private:
  struct Route {
    std::vector<const simgrid::s4u::Link*> links;  ///< each direction crossed
    std::vector<double> bandwidths;                ///< of those links, sorted
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
  std::vector<int> several_streams_;
};

}  // namespace memtwin::sim
