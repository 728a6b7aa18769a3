#include "sim/collective_meetings.h"

#include <algorithm>
#include <string>

#include "sim/one_simcall.h"

namespace memtwin::sim {

namespace sg4 = simgrid::s4u;

CollectiveMeetings::CollectiveMeetings(const Cluster& cluster, const Plan& plan, const std::vector<int>& slot_of_rank,
                                       const std::vector<int>& rank_of_slot, const Platform& platform, StandIns stand_ins,
                                       bool merge_lone)
    : cluster_(cluster), plan_(plan), slot_of_rank_(slot_of_rank), rank_of_slot_(rank_of_slot), platform_(platform),
      stand_ins_(stand_ins), full_node_of_gpu_(node_of_each_rank(plan.ranks(), cluster)) {
  std::map<std::string, int> tag_id;
  int communicators = 0;
  for (const auto& [role, groups] : plan_.groups) {
    role_id_.emplace(role, static_cast<int>(groups_of_role_.size()));
    groups_of_role_.push_back(&groups);
    first_communicator_of_role_.push_back(communicators);
    communicators += static_cast<int>(groups.size());
    std::vector<int> members;
    for (const auto& group : groups) {
      members.push_back(static_cast<int>(std::count_if(group.begin(), group.end(), [&](int r) { return slot_of_rank_[r] >= 0; })));
    }
    members_of_group_.push_back(std::move(members));
  }
  for (int rank : rank_of_slot_) {
    std::vector<int> by_role(groups_of_role_.size(), -1);
    for (const auto& [role, index] : plan_.group_of_rank[rank]) by_role[role_id_.at(role)] = index;
    group_of_slot_.push_back(std::move(by_role));
  }
  for (const Program& program : plan_.programs) {
    std::vector<Meeting> meetings(program.ops.size());
    for (std::uint32_t i = 0; i < program.ops.size(); ++i) {
      const Op& op = program.ops[i];
      if (op.kind != OpKind::collective) continue;
      Meeting& m = meetings[i];
      m.role = role_id_.at(op.role);
      m.family = op.role.rfind("pp_", 0) == 0 ? kPipelineFamily : m.role;
      m.name = op.tag.empty() ? static_cast<int>(i) : -1 - tag_id.emplace(op.tag, static_cast<int>(tag_id.size())).first->second;
    }
    meetings_.push_back(std::move(meetings));
  }
  if (merge_lone) find_lone_collectives();
}

void CollectiveMeetings::find_lone_collectives() {
  lone_ = std::make_unique<LoneCollectives>(platform_.gpus);
  // Each program's collectives by what decides their flows (kind, role, bytes), and the streams
  // each role's collectives run on.
  std::vector<std::vector<std::uint32_t>> distinct_ops(plan_.programs.size());
  std::vector<std::set<Stream>> streams_of_role(groups_of_role_.size());
  for (std::size_t p = 0; p < plan_.programs.size(); ++p) {
    std::set<std::tuple<Collective, int, double>> seen;
    const std::vector<Op>& ops = plan_.programs[p].ops;
    for (std::uint32_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind != OpKind::collective) continue;
      const Meeting& meeting = meetings_[p][i];
      streams_of_role[static_cast<std::size_t>(meeting.role)].insert(ops[i].stream);
      if (seen.emplace(ops[i].collective, meeting.role, ops[i].bytes_total).second) distinct_ops[p].push_back(i);
    }
  }
  for (std::size_t role = 0; role < groups_of_role_.size(); ++role) {
    if (streams_of_role[role].size() < 2) continue;
    for (std::size_t g = 0; g < groups_of_role_[role]->size(); ++g)
      lone_->on_several_streams(first_communicator_of_role_[role] + static_cast<int>(g));
  }
  // Every flow each simulated rank's collectives will start, and every copy's route.
  std::map<std::tuple<Collective, int, int, double>, std::pair<const Op*, const Meeting*>> added;
  for (std::size_t slot = 0; slot < rank_of_slot_.size(); ++slot) {
    const int program = plan_.program_of_rank[rank_of_slot_[slot]];
    for (std::uint32_t i : distinct_ops[static_cast<std::size_t>(program)]) {
      const Op& op = plan_.programs[static_cast<std::size_t>(program)].ops[i];
      const Meeting& meeting = meetings_[static_cast<std::size_t>(program)][i];
      const int group_index = group_of_slot_[slot][static_cast<std::size_t>(meeting.role)];
      if (!added.try_emplace({op.collective, meeting.role, group_index, op.bytes_total}, &op, &meeting).second) continue;
      for (const Flow& f : flows_on_simulated(op, meeting, group_index).flows) {
        lone_->add(communicator(meeting, group_index), platform_.gpus[static_cast<std::size_t>(f.src)],
                   platform_.gpus[static_cast<std::size_t>(f.dst)]);
      }
    }
    auto* gpu = platform_.gpus[slot];
    auto* cpu = platform_.cpus[static_cast<std::size_t>(platform_.node_of_gpu[slot])];
    for (const Op& op : plan_.programs[static_cast<std::size_t>(program)].ops) {
      if (op.kind != OpKind::copy) continue;
      if (op.direction == CopyDirection::device_to_host) lone_->add(LoneCollectives::kNeverAlone, gpu, cpu);
      if (op.direction == CopyDirection::host_to_device) lone_->add(LoneCollectives::kNeverAlone, cpu, gpu);
    }
  }
  // With every route known, each collective's flows are decided (and what the step will run is
  // known before it starts: transfer_share).
  for (const auto& [key, what] : added) folded(*what.first, *what.second, std::get<2>(key));
}

double CollectiveMeetings::transfer_share(Collective kind, const std::string& role, double bytes) const {
  const auto id = role_id_.find(role);
  if (!lone_ || id == role_id_.end()) return 1.0;
  double flows = 0, run = 0;
  for (const auto& [key, f] : folded_) {
    if (std::get<0>(key) != kind || std::get<1>(key) != id->second || std::get<3>(key) != bytes) continue;
    flows += static_cast<double>(f.flows);
    run += static_cast<double>(f.plan.flows.size());
  }
  return flows > 0 ? run / flows : 1.0;
}

void CollectiveMeetings::open_inboxes(const std::set<Stream>& streams) {
  // The names only need to be unique in the engine (several jobs' simulations may share one).
  for (Stream stream : streams) {
    std::vector<sg4::Mailbox*>& boxes = inboxes_[stream];
    for (std::size_t slot = boxes.size(); slot < rank_of_slot_.size(); ++slot) {
      boxes.push_back(sg4::Mailbox::by_name(platform_.gpus[slot]->get_name() + "." + stream_name(stream)));
    }
  }
}

const std::vector<int>& CollectiveMeetings::group(int rank, std::uint32_t index) const {
  const Meeting& meeting = meetings_[plan_.program_of_rank[rank]][index];
  return (*groups_of_role_[meeting.role])[group_of_slot_[slot_of_rank_[rank]][meeting.role]];
}

long CollectiveMeetings::meet(int rank, std::uint32_t index, const Op& op) {
  const Meeting& meeting = meetings_[plan_.program_of_rank[rank]][index];
  const int group_index = group_of_slot_[slot_of_rank_[rank]][meeting.role];
  const int members = members_of_group_[meeting.role][group_index];
  const auto entry = rendezvous_.try_emplace(std::make_tuple(meeting.name, meeting.family, group_index)).first;
  if (!entry->second) {
    entry->second = std::make_unique<Rendezvous>();
    entry->second->barrier = sg4::Barrier::create(members);
  }
  Rendezvous& rv = *entry->second;
  // A barrier's last arrival releases the others inside SimGrid: one simcall per member, where a
  // suspension and a resumption by the last would be two.
  auto all_meet = [&] {
    if (members > 1) rv.barrier->wait();
  };
  const bool last_to_arrive = ++rv.arrived == members;
  // The first to arrive finds the flows (built once per collective kind, group and size: O(n)).
  if (!rv.collective) rv.collective = &folded(op, meeting, group_index);
  const Folded& f = *rv.collective;
  long started = 0;
  if (f.by_member.usable()) {
    // Every member makes its own transfers as it arrives, the last to arrive starts them all, and
    // each member waits for its own; the last to be done charges the latency left before the others
    // are released.
    const std::size_t first = rv.transfers.size();
    f.by_member.make_transfers(slot_of_rank_[rank], inboxes_.at(op.stream), rv.transfers);
    const std::size_t end = rv.transfers.size();
    if (last_to_arrive) {
      in_one_simcall([&] {
        for (auto& transfer : rv.transfers) transfer->start();
      });
      started = f.flows;
    }
    all_meet();
    for (std::size_t i = first; i < end; ++i) rv.transfers[i]->wait();
    if (++rv.exchanged == members && f.plan.latency_s > 0) sg4::this_actor::sleep_for(f.plan.latency_s);
  } else if (last_to_arrive) {
    // The last to arrive starts every flow and waits for them; the others wait for it.
    run_collective(f.plan, platform_);
    started = f.flows;
  }
  all_meet();
  // Only collectives in flight stay in the map, so that finding one stays cheap.
  if (++rv.departed == members) rendezvous_.erase(entry);
  return started;
}

// A collective's flows on the simulated nodes. They depend only on the kind, the group and the
// bytes, and a step repeats the same few (every layer's gather alike), so each is built once:
// building one is O(group size), which at fast fidelity is the cluster's size, not the simulated
// nodes'.
const CollectiveMeetings::Folded& CollectiveMeetings::folded(const Op& op, const Meeting& meeting, int group_index) {
  auto key = std::make_tuple(op.collective, meeting.role, group_index, op.bytes_total);
  auto found = folded_.find(key);
  if (found != folded_.end()) return found->second;
  CollectivePlan plan = flows_on_simulated(op, meeting, group_index);
  const auto flows = static_cast<long>(plan.flows.size());
  if (lone_) {
    if (auto kept = lone_->stand_ins(communicator(meeting, group_index), plan.flows)) {
      std::vector<Flow> standing;
      for (std::size_t i : *kept) standing.push_back(plan.flows[i]);
      plan.flows = std::move(standing);
    }
  }
  const std::vector<int>& group = (*groups_of_role_[meeting.role])[group_index];
  // Members meeting at the same op of the same program run it on the same stream, so each can
  // move its own flows; pipeline neighbours run different programs.
  std::vector<int> member_slots;
  if (meeting.family != kPipelineFamily) {
    for (int r : group)
      if (slot_of_rank_[r] >= 0) member_slots.push_back(slot_of_rank_[r]);
  }
  MemberFlows members(plan, member_slots);
  return folded_.emplace(std::move(key), Folded{std::move(plan), std::move(members), flows}).first->second;
}

CollectivePlan CollectiveMeetings::flows_on_simulated(const Op& op, const Meeting& meeting, int group_index) const {
  const std::vector<int>& group = (*groups_of_role_[meeting.role])[group_index];
  return onto_simulated(plan_collective(op.collective, group, op.bytes_total, full_node_of_gpu_, cluster_));
}

// The flows of the simulated nodes, by platform slot; at fast fidelity a flow towards an
// unsimulated node goes to its stand-in, so every simulated link carries what it would in the full
// cluster.
CollectivePlan CollectiveMeetings::onto_simulated(const CollectivePlan& full) const {
  CollectivePlan out;
  out.latency_s = full.latency_s;
  out.bytes_per_rank = full.bytes_per_rank;
  const int per_node = cluster_.gpus_per_node;
  for (const Flow& f : full.flows) {
    if (slot_of_rank_[f.src] < 0) continue;
    int dst = f.dst;
    if (slot_of_rank_[dst] < 0) {
      const int node = dst / per_node;
      const int stage_first = node / stand_ins_.nodes_per_stage * stand_ins_.nodes_per_stage;
      const int stand_in = stage_first + (node - stage_first) % stand_ins_.simulated_per_stage;
      dst = stand_in * per_node + dst % per_node;
    }
    if (dst != f.src) out.flows.push_back({slot_of_rank_[f.src], slot_of_rank_[dst], f.bytes});
  }
  return out;
}

}  // namespace memtwin::sim
