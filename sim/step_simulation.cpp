#include "sim/step_simulation.h"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <memory>
#include <set>

#include <simgrid/s4u.hpp>

#include "models/backend.h"
#include "models/scenario/scenario_error.h"
#include "sim/collective_meetings.h"
#include "sim/collectives.h"
#include "sim/engine_setup.h"
#include "sim/fidelity_choice.h"
#include "sim/one_simcall.h"
#include "sim/resource_check.h"

namespace memtwin::sim {

namespace sg4 = simgrid::s4u;

namespace {

// The memory breakdown's categories, numbered by category_index.
constexpr std::array<const char*, 6> kCategories = {"runtime", "parameters", "gradients", "optimizer_states", "activations",
                                                    "buffers"};

std::uint8_t category_index(const std::string& tensor) {
  for (std::uint8_t i = 0; i < 4; ++i) {
    if (tensor == kCategories[i]) return i;  // the persistent ones
  }
  if (tensor.find(".activations") != std::string::npos || tensor.find("logits") != std::string::npos) return 4;
  return 5;  // gathered parameters, buckets
}

}  // namespace

std::string tensor_category(const std::string& tensor) { return kCategories[category_index(tensor)]; }

namespace {

// Actors are cooperative: between two simcalls nothing else runs, so plain flags are safe, and a
// waiting actor suspends itself after registering (no wake-up can be lost in between). This costs a
// simcall only when an actor must really wait, which keeps a million ops per step affordable.
struct RankState {
  std::vector<char> done;
  std::map<std::uint32_t, std::vector<sg4::ActorPtr>> waiters;  // op -> actors waiting for it
  std::int64_t in_use = 0;
  std::array<std::int64_t, kCategories.size()> by_category{};  // bytes in use, by category_index
};

class Simulation final : public PlanRun {
 public:
  /// `merge_lone`: see CollectiveMeetings (only where the platform is this plan's alone).
  Simulation(const Scenario& s, const Plan& plan, int trace_ranks, const std::vector<int>& simulated_nodes, Platform platform,
             bool merge_lone)
      : s_(s), plan_(plan), trace_ranks_(trace_ranks), platform_(std::move(platform)),
        slot_of_rank_(static_cast<std::size_t>(plan.ranks()), -1) {
    const int per_node = s.cluster.gpus_per_node;
    for (int node : simulated_nodes) {
      for (int g = 0; g < per_node; ++g) {
        slot_of_rank_[node * per_node + g] = static_cast<int>(rank_of_slot_.size());
        rank_of_slot_.push_back(node * per_node + g);
      }
    }
    const int pipeline = s.training->parallelism.pipeline;
    collectives_ = std::make_unique<CollectiveMeetings>(s.cluster, plan, slot_of_rank_, rank_of_slot_, platform_,
                                                        StandIns{s.cluster.nodes / pipeline,
                                                                 static_cast<int>(simulated_nodes.size()) / pipeline},
                                                        merge_lone);
    ranks_.resize(rank_of_slot_.size());
    for (std::size_t slot = 0; slot < rank_of_slot_.size(); ++slot) {
      ranks_[slot].done.assign(plan.programs[plan.program_of_rank[rank_of_slot_[slot]]].ops.size(), 0);
    }
    const Training& t = *s.training;
    peak_flops_ = s.cluster.gpu.flops.count(t.precision) ? s.cluster.gpu.flops.at(t.precision).value()
                                                          : s.cluster.gpu.flops.begin()->second.value();
    for (const auto& program : plan.programs) {
      std::map<Stream, std::vector<std::uint32_t>> streams;
      std::vector<char> foreign(program.ops.size(), 0);
      std::vector<double> seconds(program.ops.size(), 0.0);
      std::vector<std::uint8_t> category(program.ops.size(), 0);
      for (std::uint32_t i = 0; i < program.ops.size(); ++i) {
        const Op& op = program.ops[i];
        streams[op.stream].push_back(i);
        for (std::uint32_t d : op.deps) foreign[d] |= program.ops[d].stream != op.stream ? 1 : 0;
        if (op.kind == OpKind::compute) seconds[i] = compute_time(op);
        if (op.kind == OpKind::alloc || op.kind == OpKind::free) category[i] = category_index(op.tensor);
      }
      stream_ops_.push_back(streams);
      foreign_dependents_.push_back(std::move(foreign));
      op_seconds_.push_back(std::move(seconds));
      op_category_.push_back(std::move(category));
    }
  }

  static Cluster reduced(const Cluster& c, std::size_t nodes) {
    Cluster out = c;
    out.nodes = static_cast<int>(nodes);
    return out;
  }

  /// What the collectives' flows will run as (the resource estimate's transfers).
  TransferShare transfer_share() const {
    return [this](Collective kind, const std::string& role, double bytes) { return collectives_->transfer_share(kind, role, bytes); };
  }

  void report_progress_to(Progress* progress) {
    progress_ = progress;
    total_ops_ = 0;
    for (const RankState& rank : ranks_) total_ops_ += rank.done.size();
  }

  std::vector<sg4::ActorPtr> start_actors() override {
    std::vector<sg4::ActorPtr> actors;
    started_at_ = finished_at_ = sg4::Engine::get_clock();
    result_.simulated_ranks = static_cast<int>(rank_of_slot_.size());
    std::set<Stream> streams;
    for (const auto& program_streams : stream_ops_)
      for (const auto& entry : program_streams) streams.insert(entry.first);
    collectives_->open_inboxes(streams);
    for (int slot = 0; slot < static_cast<int>(rank_of_slot_.size()); ++slot) {
      const int r = rank_of_slot_[slot];
      const auto& rank_streams = stream_ops_[plan_.program_of_rank[r]];
      for (const auto& entry : rank_streams) {
        const Stream stream = entry.first;
        const auto* ops = &entry.second;  // a structured binding cannot be captured before C++20 in clang 14
        actors.push_back(sg4::Actor::create("rank" + std::to_string(r) + "." + stream_name(stream), platform_.gpus[slot],
                                            [this, r, stream, ops] {
                                              run_stream(r, stream, *ops);
                                              finished_at_ = std::max(finished_at_, sg4::Engine::get_clock());
                                            }));
      }
    }
    return actors;
  }

  StepSimulation result() override {
    // SimGrid reports a deadlock (actors waiting on activities that never complete) and returns:
    // a step with unfinished ops is a bug in the plan or the simulator, never a result.
    for (std::size_t slot = 0; slot < ranks_.size(); ++slot) {
      const auto& done = ranks_[slot].done;
      const auto unfinished = std::find(done.begin(), done.end(), 0);
      if (unfinished != done.end()) {
        const Program& program = plan_.programs[plan_.program_of_rank[rank_of_slot_[slot]]];
        throw std::logic_error("the simulation stopped with rank " + std::to_string(rank_of_slot_[slot]) +
                               "'s op '" + program.ops[static_cast<std::size_t>(unfinished - done.begin())].name +
                               "' unfinished (a deadlock)");
      }
    }
    result_.step_s = finished_at_ - started_at_;
    return std::move(result_);
  }

 private:
  void run_stream(int rank, Stream stream, const std::vector<std::uint32_t>& ops) {
    const int program_index = plan_.program_of_rank[rank];
    const Program& program = plan_.programs[program_index];
    RankState& state = ranks_[slot_of_rank_[rank]];
    for (std::size_t k = 0; k < ops.size(); ++k) {
      const std::uint32_t index = ops[k];
      const Op& op = program.ops[index];
      for (std::uint32_t d : op.deps) {
        while (!state.done[d]) {
          state.waiters[d].push_back(sg4::Actor::self());
          sg4::this_actor::suspend();
        }
      }
      if (op.kind == OpKind::compute && rank >= trace_ranks_) {
        k = run_compute_run(program_index, state, ops, k);
        continue;
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
      finish_op(state, index);
    }
  }

  // Consecutive compute ops of a stream whose inputs are ready run as one sleep of their summed
  // time, as long as no other stream waits on one of them before the last (an untraced rank's
  // clock is the same either way; it saves a simulated activity per op). Returns the last op run.
  std::size_t run_compute_run(int program_index, RankState& state, const std::vector<std::uint32_t>& ops, std::size_t first) {
    const Program& program = plan_.programs[program_index];
    const std::vector<char>& foreign = foreign_dependents_[program_index];
    const std::vector<double>& seconds = op_seconds_[program_index];
    double duration = seconds[ops[first]];
    std::size_t last = first;
    while (last + 1 < ops.size() && !foreign[ops[last]]) {
      const Op& next = program.ops[ops[last + 1]];
      if (next.kind != OpKind::compute) break;
      const bool ready = std::all_of(next.deps.begin(), next.deps.end(), [&](std::uint32_t d) {
        return state.done[d] || std::find(ops.begin() + static_cast<std::ptrdiff_t>(first),
                                          ops.begin() + static_cast<std::ptrdiff_t>(last) + 1, d) !=
                                    ops.begin() + static_cast<std::ptrdiff_t>(last) + 1;
      });
      if (!ready) break;
      duration += seconds[ops[++last]];
    }
    sg4::this_actor::sleep_for(duration);
    for (std::size_t k = first; k <= last; ++k) finish_op(state, ops[k]);
    return last;
  }

  void finish_op(RankState& state, std::uint32_t index) {
    state.done[index] = 1;
    auto waiting = state.waiters.find(index);
    if (waiting != state.waiters.end()) {
      auto actors = std::move(waiting->second);
      state.waiters.erase(waiting);
      in_one_simcall([&] {
        for (auto& a : actors) a->resume();
      });
    }
    ++result_.activities;
    if (progress_) progress_->report(++ops_done_, total_ops_, "ops");
  }

  void execute(int rank, std::uint32_t index, const Op& op) {
    switch (op.kind) {
      case OpKind::compute: sg4::this_actor::sleep_for(op_seconds_[plan_.program_of_rank[rank]][index]); break;
      case OpKind::alloc: account(rank, index, op, op.size.count()); break;
      case OpKind::free: account(rank, index, op, -op.size.count()); break;
      case OpKind::copy: copy(rank, op); break;
      case OpKind::collective: collective(rank, index, op); break;
    }
  }

  void copy(int rank, const Op& op) {
    const int slot = slot_of_rank_[rank];
    auto* gpu = platform_.gpus[slot];
    const int node = platform_.node_of_gpu[slot];
    auto* cpu = platform_.cpus[node];
    const auto bytes = static_cast<std::uint64_t>(op.bytes);
    switch (op.direction) {
      case CopyDirection::device_to_host: sg4::Comm::sendto(gpu, cpu, bytes); break;
      case CopyDirection::host_to_device: sg4::Comm::sendto(cpu, gpu, bytes); break;
      case CopyDirection::nvme_to_host:
      case CopyDirection::host_to_nvme: {
        // The plan builder only emits NVMe copies for scenarios that have NVMe (the loader requires it).
        const simgrid::s4u::Disk* disk = platform_.nvme.at(node);
        sg4::this_actor::sleep_for(s_.cluster.nvme->latency.value());
        if (op.direction == CopyDirection::nvme_to_host) {
          disk->read(bytes);
        } else {
          disk->write(bytes);
        }
        break;
      }
    }
  }

  double compute_time(const Op& op) const {
    const Cluster& c = s_.cluster;
    if (op.compute_class == ComputeClass::cpu_optimizer) {
      return op.flops / (c.host.cpu_adam_params_per_s / c.gpus_per_node);
    }
    // A GEMM's efficiency depends on its rows (the tokens it multiplies) where calibrated, and on how
    // well its tiles fill the GPU's waves: each shape of the op at its own rate.
    double math = 0;
    if (op.compute_class == ComputeClass::gemm && !op.gemms.empty()) {
      const int sms = c.gpu.sms.value_or(0);
      double shape_flops = 0, shape_time = 0;
      for (const GemmShape& g : op.gemms) {
        const double rate = peak_flops_ * c.efficiency.gemm_at(static_cast<double>(g.m)) *
                            c.efficiency.wave_utilization(g.m, g.n, sms);
        shape_flops += g.flops();
        shape_time += g.flops() / rate;
      }
      math = shape_time * op.flops / shape_flops;
    } else {
      const double efficiency = op.compute_class == ComputeClass::attention ? c.efficiency.attention : c.efficiency.gemm;
      math = op.flops / (peak_flops_ * efficiency);
    }
    const double memory = op.bytes / (c.gpu.hbm_bandwidth.value() *
                                      (op.compute_class == ComputeClass::gemm ? c.efficiency.gemm_memory : c.efficiency.memory));
    return std::max(math, memory);
  }

  void account(int rank, std::uint32_t index, const Op& op, std::int64_t delta) {
    RankState& state = ranks_[slot_of_rank_[rank]];
    state.in_use += delta;
    state.by_category[op_category_[plan_.program_of_rank[rank]][index]] += delta;
    const std::int64_t capacity = s_.cluster.gpu.memory.count();
    // The first to run out, and of those at the same instant the lowest rank: actors running at
    // one simulated time run in an order SimGrid chooses, which must not choose the report.
    const double now = sg4::Engine::get_clock();
    if (delta > 0 && state.in_use > capacity && (!result_.oom || (*result_.oom->at_s == now && rank < result_.oom->rank))) {
      result_.oom = OutOfMemoryReport{rank, op.name, op.tensor, delta, state.in_use - delta, capacity, now, std::nullopt};
    }
    if (rank == 0) {
      result_.memory_timeline.emplace_back(sg4::Engine::get_clock(), state.in_use);
      if (state.in_use > result_.peak_bytes) {
        result_.peak_bytes = state.in_use;
        for (std::size_t c = 0; c < kCategories.size(); ++c) result_.breakdown_at_peak[kCategories[c]] = state.by_category[c];
      }
    }
  }

  void collective(int rank, std::uint32_t index, const Op& op) {
    const std::vector<int>& group = collectives_->group(rank, index);
    if (group.size() < 2) return;
    if (rank == 0) {
      const bool p2p = op.collective == Collective::p2p_forward || op.collective == Collective::p2p_backward;
      const bool sender = (op.collective == Collective::p2p_forward) == (group.front() == rank);
      const double n = static_cast<double>(group.size());
      const double factor = op.collective == Collective::all_reduce ? 2.0 : 1.0;
      if (!p2p || sender) {
        result_.comm_bytes_per_gpu[collective_name(op.collective)] += p2p ? op.bytes_total : factor * op.bytes_total * (n - 1) / n;
      }
    }
    result_.flows += collectives_->meet(rank, index, op);
  }

  const Scenario& s_;
  const Plan& plan_;
  int trace_ranks_;
  Platform platform_;
  std::vector<int> slot_of_rank_;  ///< platform slot of each global rank; -1: not simulated
  std::vector<int> rank_of_slot_;
  double peak_flops_ = 0;
  double started_at_ = 0, finished_at_ = 0;  ///< the step's first and last instants
  std::vector<RankState> ranks_;  ///< by slot
  std::vector<std::map<Stream, std::vector<std::uint32_t>>> stream_ops_;
  std::vector<std::vector<char>> foreign_dependents_;  ///< by program and op: an op of another stream waits on it
  std::vector<std::vector<double>> op_seconds_;         ///< by program and op: a compute op's time
  std::vector<std::vector<std::uint8_t>> op_category_;  ///< by program and op: an alloc or free's category_index
  std::unique_ptr<CollectiveMeetings> collectives_;  ///< after platform_, which it refers to
  StepSimulation result_;
  Progress* progress_ = nullptr;
  std::uint64_t ops_done_ = 0, total_ops_ = 0;
};

}  // namespace

std::unique_ptr<PlanRun> make_plan_run(const Scenario& scenario, const Plan& plan, int trace_ranks,
                                       const std::vector<int>& simulated_nodes, Platform platform) {
  // Other jobs' traffic shares the platform's links, and a link meter counts their bytes: every
  // flow runs.
  return std::make_unique<Simulation>(scenario, plan, trace_ranks, simulated_nodes, std::move(platform), false);
}

StepSimulation simulate_step(const Scenario& scenario, const Plan& plan, int trace_ranks, Progress* progress) {
  const NodeChoice choice = simulated_nodes(scenario, plan);
  const std::vector<int>& nodes = choice.nodes;
  // Each actor's stack is a memory mapping of its own (and one more for its guard page): past the
  // kernel's limit SimGrid would abort, so say it first.
  const long actors = actors_for(scenario, plan, nodes);
  const long maps = max_memory_maps(), spare = 4096;
  if (actors + spare > maps) {
    throw ScenarioError({scenario.source_file}, "simulation.fidelity",
                        "simulating " + std::to_string(nodes.size() * scenario.cluster.gpus_per_node) + " ranks needs " +
                            std::to_string(actors) + " SimGrid actors, more than this machine's memory maps allow "
                            "(vm.max_map_count = " + std::to_string(maps) + "); use simulation.fidelity: fast, "
                            "--backend analytic, or raise vm.max_map_count");
  }
  std::vector<int> ranks;
  for (int node : nodes)
    for (int g = 0; g < scenario.cluster.gpus_per_node; ++g) ranks.push_back(node * scenario.cluster.gpus_per_node + g);
  // Memory first (what setting up the simulation would take); the time once the simulation knows
  // which flows stand for others.
  refuse_beyond_memory(scenario, estimate_step(plan, scenario.cluster, ranks, trace_ranks, actors));
  auto engine = make_engine(2 * actors + spare <= maps);
  Simulation sim(scenario, plan, trace_ranks, nodes, build_platform(Simulation::reduced(scenario.cluster, nodes.size())),
                 scenario.simulation.merge_lone_collectives);
  refuse_beyond_time(scenario, estimate_step(plan, scenario.cluster, ranks, trace_ranks, actors, sim.transfer_share()));
  sim.report_progress_to(progress);
  sim.start_actors();
  engine->run();
  StepSimulation result = sim.result();
  result.fidelity = choice.fidelity;
  result.fidelity_reason = choice.reason;
  return result;
}

}  // namespace memtwin::sim
