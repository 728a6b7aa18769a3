#pragma once
// Where a training step's ranks meet for their collectives (sim/step_simulation.cpp's actors call
// it): which group each rank's collective op belongs to, the rendezvous of the group's simulated
// members, and the flows that run once the last arrives (sim/collectives.h), folded onto the
// simulated nodes at fast fidelity. Members running the same program meet at the same op index;
// pipeline neighbours run different programs and meet by tag, both directions of a pair in one
// family.
//
// Actors are cooperative: between two simcalls nothing else runs, so plain counters are safe.
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <simgrid/s4u.hpp>

#include "models/plan/plan.h"
#include "sim/collectives.h"
#include "sim/lone_collectives.h"
#include "sim/platform.h"

namespace memtwin::sim {

/// How fast fidelity folds the cluster: a flow towards an unsimulated node goes to the simulated
/// node standing in for it (same pipeline stage, same rail).
struct StandIns {
  int nodes_per_stage = 1;      ///< nodes each pipeline stage spans in the full cluster
  int simulated_per_stage = 1;  ///< of which simulated
};

class CollectiveMeetings {
 public:
  /// The references must outlive this object (they are the step simulation's own). With
  /// `merge_lone`, a collective alone on its links runs as the few of its flows that stand for the
  /// rest (sim/lone_collectives.h): pass it only where nothing but this plan's collectives and
  /// copies crosses the platform's links, and nothing meters them link by link.
  CollectiveMeetings(const Cluster& cluster, const Plan& plan, const std::vector<int>& slot_of_rank,
                     const std::vector<int>& rank_of_slot, const Platform& platform, StandIns stand_ins,
                     bool merge_lone = false);

  /// Makes each simulated rank's mailbox for the collectives it runs on each stream. Call before
  /// the actors start: making one is a simcall, which would let other actors see a half-made table.
  void open_inboxes(const std::set<Stream>& streams);

  /// Of the flows of the collectives of this kind, role and bytes, the share that starts SimGrid
  /// transfers (1 unless constructed with `merge_lone`).
  [[nodiscard]] double transfer_share(Collective kind, const std::string& role, double bytes) const;

  /// The communicator group (global ranks) of `rank`'s collective op `index`.
  [[nodiscard]] const std::vector<int>& group(int rank, std::uint32_t index) const;

  /// Runs `rank`'s part of collective op `index` (a group of two or more): waits for the group's
  /// simulated members, runs the flows, returns when the collective has ended. Returns the flows it
  /// started (those of the whole collective for the one member that starts them, else 0), counting
  /// the flows a merged collective's one flow stands for.
  long meet(int rank, std::uint32_t index, const Op& op);

 private:
  struct Meeting {
    int name = 0;    ///< the op's index, or -1 - the tag's id where the op has a tag
    int family = 0;  ///< the role's id, or kPipelineFamily
    int role = 0;    ///< index into the plan's roles (plan.groups' keys, in order)
  };
  static constexpr int kPipelineFamily = -1;
  /// A collective's flows on the simulated nodes, and the same by member where each member can
  /// move its own (see MemberFlows).
  struct Folded {
    CollectivePlan plan;  ///< one flow where it stands for all of them (sim/lone_collectives.h)
    MemberFlows by_member;
    long flows = 0;  ///< the collective's flows on the simulated nodes
  };
  struct Rendezvous {
    int arrived = 0;
    int exchanged = 0;  ///< members whose own flows are done (flows moved by member)
    int departed = 0;   ///< members released at the end; the last one removes it
    const Folded* collective = nullptr;  ///< set by the first to arrive
    simgrid::s4u::BarrierPtr barrier;  ///< for the members: all have arrived; the collective has ended
    std::vector<simgrid::s4u::CommPtr> transfers;  ///< flows moved by member: every member's, in arrival order
  };

  const Folded& folded(const Op& op, const Meeting& meeting, int group_index);
  CollectivePlan onto_simulated(const CollectivePlan& full) const;
  CollectivePlan flows_on_simulated(const Op& op, const Meeting& meeting, int group_index) const;
  /// Every route the simulated ranks' collectives and copies will take, by communicator.
  void find_lone_collectives();
  [[nodiscard]] int communicator(const Meeting& meeting, int group_index) const {
    return first_communicator_of_role_[static_cast<std::size_t>(meeting.role)] + group_index;
  }

  const Cluster& cluster_;
  const Plan& plan_;
  const std::vector<int>& slot_of_rank_;  ///< platform slot of each global rank; -1: not simulated
  const std::vector<int>& rank_of_slot_;
  const Platform& platform_;
  StandIns stand_ins_;
  std::vector<int> full_node_of_gpu_;
  // What the hot path looks up, as integers (it runs once per rank and collective).
  std::vector<std::vector<Meeting>> meetings_;  ///< by program and op
  std::vector<const std::vector<std::vector<int>>*> groups_of_role_;  ///< by role id: plan.groups[role]
  std::vector<std::vector<int>> group_of_slot_;     ///< by slot and role id: its group's index
  std::vector<std::vector<int>> members_of_group_;  ///< by role id and group: simulated members
  std::vector<int> first_communicator_of_role_;     ///< by role id: its groups' ids follow
  std::map<std::string, int> role_id_;
  std::unique_ptr<LoneCollectives> lone_;           ///< with merge_lone only
  std::map<std::tuple<int, int, int>, std::unique_ptr<Rendezvous>> rendezvous_;  ///< (name, family, group)
  std::map<std::tuple<Collective, int, int, double>, Folded> folded_;
  std::map<Stream, std::vector<simgrid::s4u::Mailbox*>> inboxes_;
};

}  // namespace memtwin::sim
