#include "sim/step_simulation.h"

#include <algorithm>
#include <memory>

#include <simgrid/s4u.hpp>

#include "sim/collectives.h"
#include "sim/engine_setup.h"
#include "sim/platform.h"

namespace memtwin::sim {

namespace sg4 = simgrid::s4u;

std::string tensor_category(const std::string& tensor) {
  for (const char* persistent : {"runtime", "parameters", "gradients", "optimizer_states"}) {
    if (tensor == persistent) return persistent;
  }
  if (tensor.find(".activations") != std::string::npos || tensor.find("logits") != std::string::npos) {
    return "activations";
  }
  return "buffers";  // gathered parameters, buckets
}

namespace {

// Actors are cooperative: between two simcalls nothing else runs, so plain flags are safe, and a
// waiting actor suspends itself after registering (no wake-up can be lost in between). This costs a
// simcall only when an actor must really wait, which keeps a million ops per step affordable.
struct RankState {
  std::vector<char> done;
  std::map<std::uint32_t, std::vector<sg4::ActorPtr>> waiters;  // op -> actors waiting for it
  std::int64_t in_use = 0;
  std::map<std::string, std::int64_t> by_category;
};

struct Rendezvous {
  int arrived = 0;
  bool finished = false;
  std::vector<sg4::ActorPtr> waiting;
};

class Simulation {
 public:
  Simulation(const Scenario& s, const Plan& plan, int trace_ranks, int simulated_nodes)
      : s_(s), plan_(plan), trace_ranks_(trace_ranks), platform_(build_platform(reduced(s.cluster, simulated_nodes))),
        simulated_ranks_(simulated_nodes * s.cluster.gpus_per_node) {
    ranks_.resize(simulated_ranks_);
    for (int r = 0; r < simulated_ranks_; ++r) ranks_[r].done.assign(plan.programs[plan.program_of_rank[r]].ops.size(), 0);
    for (const auto& program : plan.programs) {
      std::map<Stream, std::vector<std::uint32_t>> streams;
      for (std::uint32_t i = 0; i < program.ops.size(); ++i) streams[program.ops[i].stream].push_back(i);
      stream_ops_.push_back(streams);
    }
    const Training& t = *s.training;
    peak_flops_ = s.cluster.gpu.flops.count(t.precision) ? s.cluster.gpu.flops.at(t.precision).value()
                                                          : s.cluster.gpu.flops.begin()->second.value();
  }

  static Cluster reduced(const Cluster& c, int nodes) {
    Cluster out = c;
    out.nodes = nodes;
    return out;
  }

  void start_actors() {
    result_.simulated_ranks = simulated_ranks_;
    for (int r = 0; r < simulated_ranks_; ++r) {
      const auto& streams = stream_ops_[plan_.program_of_rank[r]];
      for (const auto& [stream, ops] : streams) {
        sg4::Actor::create("rank" + std::to_string(r) + "." + stream_name(stream), platform_.gpus[r],
                           [this, r, stream, &ops] { run_stream(r, stream, ops); });
      }
    }
  }

  StepSimulation result() {
    result_.step_s = sg4::Engine::get_clock();
    return std::move(result_);
  }

 private:
  void run_stream(int rank, Stream stream, const std::vector<std::uint32_t>& ops) {
    const Program& program = plan_.programs[plan_.program_of_rank[rank]];
    RankState& state = ranks_[rank];
    for (std::uint32_t index : ops) {
      const Op& op = program.ops[index];
      for (std::uint32_t d : op.deps) {
        while (!state.done[d]) {
          state.waiters[d].push_back(sg4::Actor::self());
          sg4::this_actor::suspend();
        }
      }
      const double start = sg4::Engine::get_clock();
      execute(rank, index, op);
      const double end = sg4::Engine::get_clock();
      if (rank == 0 && end > start) {
        if (stream == Stream::compute) result_.compute_busy_s += end - start;
        if (stream == Stream::comm) result_.comm_busy_s += end - start;
      }
      if (rank < trace_ranks_ && (op.kind != OpKind::alloc && op.kind != OpKind::free)) {
        result_.events.push_back({rank, stream, op.name, start, end});
      }
      state.done[index] = 1;
      auto waiting = state.waiters.find(index);
      if (waiting != state.waiters.end()) {
        auto actors = std::move(waiting->second);
        state.waiters.erase(waiting);
        for (auto& a : actors) a->resume();
      }
      ++result_.activities;
    }
  }

  void execute(int rank, std::uint32_t index, const Op& op) {
    switch (op.kind) {
      case OpKind::compute: sg4::this_actor::sleep_for(compute_time(op)); break;
      case OpKind::alloc: account(rank, op, op.size.count()); break;
      case OpKind::free: account(rank, op, -op.size.count()); break;
      case OpKind::copy: {
        const int node = platform_.node_of_gpu[rank];
        auto* gpu = platform_.gpus[rank];
        auto* cpu = platform_.cpus[node];
        if (op.direction == CopyDirection::device_to_host) {
          sg4::Comm::sendto(gpu, cpu, static_cast<uint64_t>(op.bytes));
        } else {
          sg4::Comm::sendto(cpu, gpu, static_cast<uint64_t>(op.bytes));
        }
        break;
      }
      case OpKind::collective: collective(rank, index, op); break;
    }
  }

  double compute_time(const Op& op) const {
    const Cluster& c = s_.cluster;
    if (op.compute_class == ComputeClass::cpu_optimizer) {
      return op.flops / (c.host.cpu_adam_params_per_s / c.gpus_per_node);
    }
    // A GEMM's efficiency depends on its rows (the tokens it multiplies) where calibrated.
    const double rows = op.gemms.empty() ? 0 : static_cast<double>(op.gemms.front().m);
    const double efficiency = op.compute_class == ComputeClass::gemm        ? (rows > 0 ? c.efficiency.gemm_at(rows) : c.efficiency.gemm)
                              : op.compute_class == ComputeClass::attention ? c.efficiency.attention
                                                                            : c.efficiency.gemm;
    const double math = op.flops / (peak_flops_ * efficiency);
    const double memory = op.bytes / (c.gpu.hbm_bandwidth.value() *
                                      (op.compute_class == ComputeClass::gemm ? c.efficiency.gemm_memory : c.efficiency.memory));
    return std::max(math, memory);
  }

  void account(int rank, const Op& op, std::int64_t delta) {
    RankState& state = ranks_[rank];
    state.in_use += delta;
    state.by_category[tensor_category(op.tensor)] += delta;
    const std::int64_t capacity = s_.cluster.gpu.memory.count();
    if (delta > 0 && state.in_use > capacity && !result_.oom) {
      result_.oom = OutOfMemory{rank, op.name, op.tensor, delta, state.in_use - delta, capacity, sg4::Engine::get_clock()};
    }
    if (rank == 0) {
      result_.memory_timeline.emplace_back(sg4::Engine::get_clock(), state.in_use);
      if (state.in_use > result_.peak_bytes) {
        result_.peak_bytes = state.in_use;
        result_.breakdown_at_peak = state.by_category;
      }
    }
  }

  void collective(int rank, std::uint32_t index, const Op& op) {
    const int group_index = plan_.group_of_rank[rank].at(op.role);
    const std::vector<int>& group = plan_.groups.at(op.role)[group_index];
    if (group.size() < 2) return;
    const int members = static_cast<int>(std::count_if(group.begin(), group.end(), [&](int r) { return r < simulated_ranks_; }));
    // Members running the same program meet at the same op index; pipeline neighbours run different
    // programs and meet by tag. Both ends of a pipeline pair name it from their side.
    const std::string family = op.role.rfind("pp_", 0) == 0 ? "pp" : op.role;
    auto key = std::make_tuple(op.tag.empty() ? "#" + std::to_string(index) : op.tag, family, group_index);
    auto& slot = rendezvous_[key];
    if (!slot) slot = std::make_unique<Rendezvous>();
    Rendezvous& rv = *slot;
    const bool launcher = ++rv.arrived == members;
    if (rank == 0) {
      const bool p2p = op.collective == Collective::p2p_forward || op.collective == Collective::p2p_backward;
      const bool sender = (op.collective == Collective::p2p_forward) == (group.front() == rank);
      const double n = static_cast<double>(group.size());
      const double factor = op.collective == Collective::all_reduce ? 2.0 : 1.0;
      if (!p2p || sender) {
        result_.comm_bytes_per_gpu[collective_name(op.collective)] += p2p ? op.bytes_total : factor * op.bytes_total * (n - 1) / n;
      }
    }
    if (launcher) {
      // Only the last rank to arrive builds and runs the flows (O(n) once per collective).
      CollectivePlan cp = plan_collective(op.collective, group, op.bytes_total, full_node_of_gpu_, s_.cluster);
      if (simulated_ranks_ < plan_.ranks()) cp = fold_onto_simulated(cp);
      result_.flows += static_cast<long>(cp.flows.size());
      run_collective(cp, platform_);
      rv.finished = true;
      for (auto& a : rv.waiting) a->resume();
      rv.waiting.clear();
    } else {
      while (!rv.finished) {
        rv.waiting.push_back(sg4::Actor::self());
        sg4::this_actor::suspend();
      }
    }
  }

  // Fast fidelity: the flows of the simulated nodes, with a flow to an unsimulated node redirected
  // to the simulated node standing in for it (same rail), so every simulated link carries what it
  // would in the full cluster.
  CollectivePlan fold_onto_simulated(const CollectivePlan& full) const {
    CollectivePlan out;
    out.latency_s = full.latency_s;
    out.bytes_per_rank = full.bytes_per_rank;
    const int per_node = s_.cluster.gpus_per_node;
    const int nodes = simulated_ranks_ / per_node;
    for (const Flow& f : full.flows) {
      if (f.src >= simulated_ranks_) continue;
      Flow g = f;
      if (g.dst >= simulated_ranks_) g.dst = ((g.dst / per_node) % nodes) * per_node + g.dst % per_node;
      if (g.dst != g.src) out.flows.push_back(g);
    }
    return out;
  }

  const Scenario& s_;
  const Plan& plan_;
  int trace_ranks_;
  Platform platform_;
  int simulated_ranks_;
  std::vector<int> full_node_of_gpu_ = [this] {
    std::vector<int> v(plan_.ranks());
    for (int r = 0; r < plan_.ranks(); ++r) v[r] = r / s_.cluster.gpus_per_node;
    return v;
  }();
  double peak_flops_ = 0;
  std::vector<RankState> ranks_;
  std::vector<std::map<Stream, std::vector<std::uint32_t>>> stream_ops_;
  std::map<std::tuple<std::string, std::string, int>, std::unique_ptr<Rendezvous>> rendezvous_;
  StepSimulation result_;
};

}  // namespace

StepSimulation simulate_step(const Scenario& scenario, const Plan& plan, int trace_ranks) {
  // Fast fidelity folds data-parallel replicas; pipeline stages differ, so with pipelines every
  // rank is simulated.
  const bool fast = scenario.simulation.fidelity == Fidelity::fast && scenario.training->parallelism.pipeline == 1;
  const int simulated_nodes = fast ? std::min(scenario.cluster.nodes, 2) : scenario.cluster.nodes;
  auto engine = make_engine();
  Simulation sim(scenario, plan, trace_ranks, simulated_nodes);
  sim.start_actors();
  engine->run();
  return sim.result();
}

}  // namespace memtwin::sim
