#include "models/plan/training_plan.h"

#include <cstdio>

#include "models/memory/model_states.h"
#include "models/model_facts.h"
#include "models/plan/stage_program.h"

#include <memory>

namespace memtwin {

double model_flops_per_gpu_step(const Scenario& s) {
  const Training& t = *s.training;
  const double tokens_per_gpu = static_cast<double>(t.global_batch) * t.seq_len / s.cluster.total_gpus();
  return 3 * forward_flops_per_token(s.model, t.seq_len).value() * tokens_per_gpu;
}

namespace {
constexpr double kMaxPlanOps = 1.6e6;  // about 1 GB of ops (kPlanBytesPerOp)
}  // namespace

Plan build_training_plan(const Scenario& s) {
  const Training& t = *s.training;
  const ModelSpec& m = s.model;
  if (!m.architecture_known) throw PlanUnsupported("simulating a step needs the model's architecture, not only its parameter count");

  const int gpus = s.cluster.total_gpus();
  const int tp = t.parallelism.tensor;
  const int pp = t.parallelism.pipeline;
  const int dp = gpus / (tp * pp);  // ranks holding the same weights, context ranks included
  const int cp = t.parallelism.context;
  const int microbatches = t.global_batch / (t.micro_batch * (dp / cp));
  const int chunks = t.parallelism.schedule == PipelineSchedule::interleaved ? t.parallelism.interleave : 1;
  // Each micro-batch emits some 15 ops per block, forward and backward, in the program of the
  // block's stage: refuse a plan that would not fit in memory (some 600 bytes an op with its
  // shapes and names) before building it.
  const double plan_ops = 15.0 * microbatches * static_cast<double>(m.layers);
  if (plan_ops > kMaxPlanOps) {
    char estimate[96];
    std::snprintf(estimate, sizeof estimate, "about %.2g plan ops (%.1f GB)", plan_ops, plan_ops * kPlanBytesPerOp / 1e9);
    throw PlanUnsupported(std::string("a step of ") + std::to_string(microbatches) + " micro-batches over " +
                          std::to_string(m.layers) + " blocks is " + estimate + ", past the " +
                          std::to_string(static_cast<long>(kMaxPlanOps)) +
                          " a plan is built for (1 GB); a larger training.micro_batch makes fewer micro-batches "
                          "(the memory model needs no plan: --backend analytic)");
  }
  if (chunks > 1 && microbatches % pp != 0) {
    throw PlanUnsupported("the interleaved schedule needs the micro-batches per step (" + std::to_string(microbatches) +
                          ") to be a multiple of the pipeline stages (" + std::to_string(pp) + "), as Megatron-LM does");
  }
  const ShardingLayout layout = sharding_layout(t, dp);
  const int ep = t.parallelism.expert;
  const bool hybrid = t.sharding.strategy == ShardingStrategy::fsdp && t.sharding.fsdp_mode == FsdpMode::hybrid_shard &&
                      layout.degree < dp;
  if (ep > 1 && hybrid) {
    throw PlanUnsupported("expert parallelism with FSDP hybrid sharding is not simulated yet; use --backend analytic");
  }
  // Rank order as Megatron lays it out: tensor ranks adjacent (inside a node), then context ranks,
  // then data-parallel replicas, then pipeline stages. `d` runs over data x context ranks.
  auto rank_of = [&](int stage, int d, int r) { return stage * dp * tp + d * tp + r; };

  Plan plan;
  plan.description = std::to_string(gpus) + " ranks: data parallel " + std::to_string(dp / cp) + " x tensor " +
                     std::to_string(tp) + (cp > 1 ? " x context " + std::to_string(cp) : "") + " x pipeline " +
                     std::to_string(pp) +
                     (ep > 1 ? " (expert parallel " + std::to_string(ep) + ")" : "") + ", " + std::to_string(microbatches) +
                     " micro-batches, " + std::to_string(pp) + (pp == 1 ? " program" : " programs (one per stage)");
  plan.group_of_rank.resize(gpus);
  auto add_group = [&](const std::string& role, const std::vector<int>& members) {
    plan.groups[role].push_back(members);
    for (int r : members) plan.group_of_rank[r][role] = static_cast<int>(plan.groups[role].size() - 1);
  };
  for (int stage = 0; stage < pp; ++stage) {
    for (int d = 0; d < dp; ++d) {
      std::vector<int> g;
      for (int r = 0; r < tp; ++r) g.push_back(rank_of(stage, d, r));
      add_group("tp", g);
    }
    for (int first = 0; cp > 1 && first < dp; first += cp) {
      for (int r = 0; r < tp; ++r) {
        std::vector<int> g;
        for (int c = 0; c < cp; ++c) g.push_back(rank_of(stage, first + c, r));
        add_group("cp", g);
      }
    }
    for (int r = 0; r < tp; ++r) {
      std::vector<int> g;
      for (int d = 0; d < dp; ++d) g.push_back(rank_of(stage, d, r));
      add_group("dp", g);
      if (ep > 1) {
        // Expert parallelism inside the data-parallel group: EP consecutive replicas exchange
        // tokens ("ep"); the replicas holding the same experts reduce their gradients ("edp").
        for (int first = 0; first < dp; first += ep) add_group("ep", {g.begin() + first, g.begin() + first + ep});
        for (int offset = 0; offset < ep; ++offset) {
          std::vector<int> same_experts;
          for (int first = 0; first < dp; first += ep) same_experts.push_back(g[first + offset]);
          add_group("edp", same_experts);
        }
      }
      if (hybrid) {
        const int shard = layout.degree;
        for (int first = 0; first < dp; first += shard) add_group("shard", {g.begin() + first, g.begin() + first + shard});
        for (int offset = 0; offset < shard; ++offset) {
          std::vector<int> replica;
          for (int first = 0; first < dp; first += shard) replica.push_back(g[first + offset]);
          add_group("replica", replica);
        }
      }
    }
  }
  // Pipeline neighbours: one pair per stage and the next, seen as "pp_next" from the sender of
  // activations and "pp_prev" from the receiver. Interleaving also links the last stage to the
  // first (chunk c of the last stage feeds chunk c + 1 of the first).
  const int links = chunks > 1 ? pp : pp - 1;
  for (int stage = 0; stage < links; ++stage) {
    for (int d = 0; d < dp; ++d) {
      for (int r = 0; r < tp; ++r) {
        const int sender = rank_of(stage, d, r), receiver = rank_of((stage + 1) % pp, d, r);
        plan.groups["pp_next"].push_back({sender, receiver});
        plan.groups["pp_prev"].push_back({sender, receiver});
        const int index = static_cast<int>(plan.groups["pp_next"].size() - 1);
        plan.group_of_rank[sender]["pp_next"] = index;
        plan.group_of_rank[receiver]["pp_prev"] = index;
      }
    }
  }

  plan.program_of_rank.assign(gpus, 0);
  for (int stage = 0; stage < pp; ++stage) {
    for (int d = 0; d < dp; ++d)
      for (int r = 0; r < tp; ++r) plan.program_of_rank[rank_of(stage, d, r)] = stage;
  }
  // Blocks over the virtual stages as evenly as possible; the first ones take the remainder.
  const int virtual_stages = pp * chunks;
  std::vector<int> first_layer(virtual_stages + 1, 0);
  for (int v = 0; v < virtual_stages; ++v) {
    first_layer[v + 1] = first_layer[v] + m.layers / virtual_stages + (v < m.layers % virtual_stages ? 1 : 0);
  }
  for (int stage = 0; stage < pp; ++stage) {
    plan.programs.push_back(Program{pp == 1 ? "train_step" : "train_step.stage" + std::to_string(stage), {}});
    std::vector<std::unique_ptr<StageProgramBuilder>> builders;
    for (int c = 0; c < chunks; ++c) {
      StageSpec spec;
      spec.stage = stage;
      spec.stages = pp;
      spec.virtual_stage = c * pp + stage;
      spec.virtual_stages = virtual_stages;
      spec.first_layer = first_layer[spec.virtual_stage];
      spec.layers = first_layer[spec.virtual_stage + 1] - spec.first_layer;
      spec.has_embedding = spec.virtual_stage == 0;
      spec.has_head = spec.virtual_stage == virtual_stages - 1;
      spec.microbatches = microbatches;
      spec.dp_ranks = dp;
      spec.hybrid = hybrid;
      spec.shard_degree = layout.degree;
      builders.push_back(std::make_unique<StageProgramBuilder>(s, spec, plan.programs.back()));
      if (c == 0) builders[0]->prologue(); else builders[c]->attach(*builders[0]);
    }
    for (const Pass& pass : pipeline_schedule(t.parallelism.schedule, stage, pp, microbatches, chunks)) {
      if (pass.kind == 'F') builders[pass.chunk]->forward(pass.microbatch); else builders[pass.chunk]->backward(pass.microbatch);
    }
    std::vector<const StageProgramBuilder*> others;
    for (int c = 1; c < chunks; ++c) others.push_back(builders[c].get());
    builders[0]->epilogue(others);
    if (stage == 0) plan.persistent_bytes = builders[0]->persistent_bytes();
  }
  return plan;
}

}  // namespace memtwin
