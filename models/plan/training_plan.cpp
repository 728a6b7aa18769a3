#include "models/plan/training_plan.h"

#include "models/memory/model_states.h"
#include "models/model_facts.h"
#include "models/plan/stage_program.h"

namespace memtwin {

double model_flops_per_gpu_step(const Scenario& s) {
  const Training& t = *s.training;
  const double tokens_per_gpu = static_cast<double>(t.global_batch) * t.seq_len / s.cluster.total_gpus();
  return 3 * forward_flops_per_token(s.model, t.seq_len).value() * tokens_per_gpu;
}

Plan build_training_plan(const Scenario& s) {
  const Training& t = *s.training;
  const ModelSpec& m = s.model;
  if (!m.architecture_known) throw PlanUnsupported("simulating a step needs the model's architecture, not only its parameter count");
  if (t.parallelism.expert > 1) throw PlanUnsupported("the sim backend does not model expert parallelism yet; use --backend analytic");
  if (t.parallelism.schedule == PipelineSchedule::interleaved) {
    throw PlanUnsupported("the sim backend does not model the interleaved pipeline schedule yet (1f1b and gpipe are); "
                          "use --backend analytic or pipeline_schedule: 1f1b");
  }

  const int gpus = s.cluster.total_gpus();
  const int tp = t.parallelism.tensor;
  const int pp = t.parallelism.pipeline;
  const int dp = gpus / (tp * pp);
  const int microbatches = t.global_batch / (t.micro_batch * dp);
  const ShardingLayout layout = sharding_layout(t, dp);
  const bool hybrid = t.sharding.strategy == ShardingStrategy::fsdp && t.sharding.fsdp_mode == FsdpMode::hybrid_shard &&
                      layout.degree < dp;
  // Rank order as Megatron lays it out: tensor ranks adjacent (inside a node), then data-parallel
  // replicas, then pipeline stages.
  auto rank_of = [&](int stage, int d, int r) { return stage * dp * tp + d * tp + r; };

  Plan plan;
  plan.description = std::to_string(gpus) + " ranks: data parallel " + std::to_string(dp) + " x tensor " +
                     std::to_string(tp) + " x pipeline " + std::to_string(pp) + ", " + std::to_string(microbatches) +
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
    for (int r = 0; r < tp; ++r) {
      std::vector<int> g;
      for (int d = 0; d < dp; ++d) g.push_back(rank_of(stage, d, r));
      add_group("dp", g);
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
  // Pipeline neighbours: one pair per consecutive stages, seen as "pp_next" from the lower stage
  // and "pp_prev" from the upper one.
  for (int stage = 0; stage + 1 < pp; ++stage) {
    for (int d = 0; d < dp; ++d) {
      for (int r = 0; r < tp; ++r) {
        const int lower = rank_of(stage, d, r), upper = rank_of(stage + 1, d, r);
        plan.groups["pp_next"].push_back({lower, upper});
        plan.groups["pp_prev"].push_back({lower, upper});
        const int index = static_cast<int>(plan.groups["pp_next"].size() - 1);
        plan.group_of_rank[lower]["pp_next"] = index;
        plan.group_of_rank[upper]["pp_prev"] = index;
      }
    }
  }

  plan.program_of_rank.assign(gpus, 0);
  for (int stage = 0; stage < pp; ++stage) {
    for (int d = 0; d < dp; ++d)
      for (int r = 0; r < tp; ++r) plan.program_of_rank[rank_of(stage, d, r)] = stage;
  }
  // Blocks over stages as evenly as possible; the first stages take the remainder.
  int first_layer = 0;
  for (int stage = 0; stage < pp; ++stage) {
    StageSpec spec;
    spec.stage = stage;
    spec.stages = pp;
    spec.first_layer = first_layer;
    spec.layers = m.layers / pp + (stage < m.layers % pp ? 1 : 0);
    first_layer += spec.layers;
    spec.has_embedding = stage == 0;
    spec.has_head = stage == pp - 1;
    spec.microbatches = microbatches;
    spec.dp_ranks = dp;
    spec.hybrid = hybrid;
    spec.shard_degree = layout.degree;
    plan.programs.push_back(Program{pp == 1 ? "train_step" : "train_step.stage" + std::to_string(stage), {}});
    StageProgramBuilder builder(s, spec, plan.programs.back());
    builder.prologue();
    for (const auto& [pass, mb] : pipeline_schedule(t.parallelism.schedule, stage, pp, microbatches)) {
      if (pass == 'F') builder.forward(mb); else builder.backward(mb);
    }
    builder.epilogue();
    if (stage == 0) plan.persistent_bytes = builder.persistent_bytes();
  }
  return plan;
}

}  // namespace memtwin
