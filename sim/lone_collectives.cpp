#include "sim/lone_collectives.h"

#include <algorithm>
#include <set>
#include <tuple>

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
  if (several_streams_.count(communicator)) return false;
  auto mine = links_of_.find(communicator);
  if (mine == links_of_.end()) return false;
  return std::all_of(mine->second.begin(), mine->second.end(),
                     [&](const sg4::Link* link) { return user_of_link_.at(link) == communicator; });
}

namespace {

// Flows joined by the link directions they share, transitively (union-find by flow index).
class Components {
 public:
  explicit Components(std::size_t n) : parent_(n) {
    for (std::size_t i = 0; i < n; ++i) parent_[i] = i;
  }
  std::size_t root(std::size_t i) {
    while (parent_[i] != i) i = parent_[i] = parent_[parent_[i]];
    return i;
  }
  void join(std::size_t a, std::size_t b) {
    a = root(a), b = root(b);
    if (a != b) parent_[std::max(a, b)] = std::min(a, b);  // the lowest index names a component
  }

 private:
  std::vector<std::size_t> parent_;
};

}  // namespace

std::optional<std::vector<std::size_t>> LoneCollectives::stand_ins(int communicator, const std::vector<Flow>& flows) const {
  if (flows.size() < 2 || !alone(communicator)) return std::nullopt;
  std::vector<const Route*> routes;
  std::unordered_map<const sg4::Link*, std::vector<std::size_t>> flows_on;  // each link direction's flows
  Components components(flows.size());
  for (std::size_t i = 0; i < flows.size(); ++i) {
    const Flow& f = flows[i];
    if (!(f.bytes > 0)) return std::nullopt;
    const Route* r = known_route(gpus_.at(static_cast<std::size_t>(f.src)), gpus_.at(static_cast<std::size_t>(f.dst)));
    if (r == nullptr) return std::nullopt;  // not added: its links were never checked
    routes.push_back(r);
    for (const sg4::Link* link : r->links) {
      auto& on = flows_on[link];
      if (!on.empty()) components.join(on.front(), i);
      on.push_back(i);
    }
  }
  // What decides a flow's rate and end: its bytes, its route's latency, and each link direction's
  // bandwidth with the number of flows sharing it (all of them the collective's: it is alone).
  // Compared exactly, as SimGrid's arithmetic on equal numbers gives equal results.
  using Shape = std::tuple<double, double, std::vector<std::pair<double, std::size_t>>>;
  auto shape = [&](std::size_t i) {
    std::vector<std::pair<double, std::size_t>> links;
    for (std::size_t k = 0; k < routes[i]->links.size(); ++k)
      links.emplace_back(routes[i]->bandwidths[k], flows_on.at(routes[i]->links[k]).size());
    std::sort(links.begin(), links.end());
    return Shape{flows[i].bytes, routes[i]->latency, std::move(links)};
  };
  // A component whose flows all have one shape gives each flow the same rate - the narrowest
  // share, bandwidth / flows, which every flow's route has among its links - and ends as one. Of
  // components alike in shape and size one stands for the others.
  // A component of mixed shapes runs whole.
  std::map<std::size_t, std::pair<std::size_t, std::optional<Shape>>> component;  // root: flows, shape (none: mixed)
  for (std::size_t i = 0; i < flows.size(); ++i) {
    auto [entry, first] = component.try_emplace(components.root(i));
    auto& [count, common] = entry->second;
    ++count;
    Shape mine = shape(i);
    if (first) {
      common = std::move(mine);
    } else if (common && *common != mine) {
      common.reset();
    }
  }
  std::set<std::pair<std::size_t, Shape>> classes;
  std::set<std::size_t> kept_roots;
  for (const auto& [root, entry] : component)
    if (!entry.second || classes.emplace(entry.first, *entry.second).second) kept_roots.insert(root);
  std::vector<std::size_t> kept;
  for (std::size_t i = 0; i < flows.size(); ++i)
    if (kept_roots.count(components.root(i))) kept.push_back(i);
  if (kept.size() == flows.size()) return std::nullopt;
  return kept;
}

}  // namespace memtwin::sim
