#include "sim/lone_collectives.h"

#include <algorithm>

namespace memtwin::sim {

namespace sg4 = simgrid::s4u;

const LoneCollectives::Route& LoneCollectives::route(const sg4::Host* src, const sg4::Host* dst) {
  auto [entry, inserted] = routes_.try_emplace({src, dst});
  if (inserted) {
    // The platform's own routing decides (sim/platform.cpp); a split-duplex link's directions are
    // links of their own here, so a flow and its reverse do not count as sharing.
    std::vector<sg4::Link*> links;
    double latency = 0;
    src->route_to(dst, links, &latency);
    Route& r = entry->second;
    r.latency = latency;
    for (const sg4::Link* link : links) {
      r.links.push_back(link);
      r.bandwidths.push_back(link->get_bandwidth());
    }
    std::sort(r.bandwidths.begin(), r.bandwidths.end());
  }
  return entry->second;
}

const LoneCollectives::Route* LoneCollectives::known_route(const sg4::Host* src, const sg4::Host* dst) const {
  auto found = routes_.find({src, dst});
  return found == routes_.end() ? nullptr : &found->second;
}

void LoneCollectives::add(int communicator, const sg4::Host* src, const sg4::Host* dst) {
  for (const sg4::Link* link : route(src, dst).links) {
    auto [user, first] = user_of_link_.try_emplace(link, communicator);
    if (!first && user->second != communicator) user->second = kShared;
    if (communicator != kNeverAlone) links_of_[communicator].insert(link);
  }
}

bool LoneCollectives::alone(int communicator) const {
  if (communicator == kNeverAlone) return false;
  if (std::find(several_streams_.begin(), several_streams_.end(), communicator) != several_streams_.end()) return false;
  auto mine = links_of_.find(communicator);
  if (mine == links_of_.end()) return false;
  return std::all_of(mine->second.begin(), mine->second.end(),
                     [&](const sg4::Link* link) { return user_of_link_.at(link) == communicator; });
}

std::optional<std::size_t> LoneCollectives::stand_in(int communicator, const std::vector<Flow>& flows) const {
  if (flows.size() < 2 || !alone(communicator)) return std::nullopt;
  const Route* first = nullptr;
  std::unordered_set<const sg4::Link*> crossed;
  for (const Flow& f : flows) {
    // Bytes compared exactly: each flow's time is SimGrid's arithmetic on them, and must be the same.
    if (!(f.bytes > 0) || f.bytes != flows.front().bytes) return std::nullopt;
    const Route* r = known_route(gpus_.at(static_cast<std::size_t>(f.src)), gpus_.at(static_cast<std::size_t>(f.dst)));
    if (r == nullptr) return std::nullopt;  // not added: its links were never checked
    if (first == nullptr) first = r;
    if (r->latency != first->latency || r->bandwidths != first->bandwidths) return std::nullopt;
    for (const sg4::Link* link : r->links)
      if (!crossed.insert(link).second) return std::nullopt;
  }
  return 0;
}

}  // namespace memtwin::sim
