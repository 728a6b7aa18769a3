#pragma once
// A serving iteration's plan: which ops it runs for its batch, named the same way by the
// simulator, which prices them (iteration_cost.h), and by a hardware engine, which records every
// op it executes (hw/timed_serving_kernels.h). An op's signature is its kind and what tells ops of
// that kind apart: a weight GEMM's shape ("weight_gemm 4096x6144": inner x outputs on one tensor
// rank), the cache format an attention or cache-write kernel runs on ("decode_attention int4").
//
// A run's plan hash is the workload and engine rules (serving_plan_hash) together with the
// signatures of every op the run executed: the simulator's from the ops its iterations planned, the
// engine's from the calls it made. Equal hashes mean both ran the same requests under the same
// rules through the same ops, which is what `memtwin validate` requires before comparing them.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/kv/kv_method.h"
#include "models/scenario.h"
#include "models/serving/iteration_cost.h"
#include "models/serving/iteration_ops.h"

namespace memtwin {

/// "KIND" or "KIND DETAIL", the kind as kIterationOpNames spells it.
std::string op_signature(IterationOp kind, const std::string& detail = "");
/// A collective's: "collective all_gather expert_parallel" (its kind, then its group).
std::string collective_signature(const std::string& kind, const std::string& group);

class IterationPlan {
 public:
  explicit IterationPlan(const Scenario& s);
  /// The kinds of work an iteration with this load runs: weight GEMMs, elementwise work and cache
  /// writes for any token; prefill attention for prompt tokens; decode attention for decoding
  /// sequences; the method's selection (a prompt vote when a prompt completes, accumulated scores'
  /// prompt scoring while prompts are prefilled) and accumulated scores' upkeep for every written token;
  /// the collectives between GPUs for any token where the replica spans several or shares experts.
  [[nodiscard]] IterationOpKinds kinds(const IterationLoad& load) const;
  /// The signatures of those kinds' ops under this scenario.
  [[nodiscard]] std::set<std::string> signatures(IterationOpKinds kinds) const;
  /// The plan as `memtwin run --emit-plan` writes it (schema "memtwin.iteration_plan/1"): every op an
  /// iteration may run, with its signature and when it runs, and the collectives between its GPUs
  /// (as many per iteration as the iteration model runs, bytes per call per token).
  [[nodiscard]] nlohmann::ordered_json to_json() const;

 private:
  std::vector<std::string> gemms_;  // the weight GEMMs' shapes on one tensor rank
  std::string attention_format_;    // decode attention's and the cache write's format
  KvSelection selection_ = KvSelection::all;
  std::string method_;
  int tensor_parallel_ = 1;
  int expert_parallel_ = 1;  // GPUs sharing a MoE layer's experts (ServingSpec::expert_parallel_size)
  struct Collective {
    const char* kind;
    const char* group;
    int per_iteration;
    double bytes_per_token;  // per call, per token computed (expert parallelism: of the busiest replica)
  };
  std::vector<Collective> collectives_;
};

/// The plan hash of a serving run: its workload and engine rules (serving_plan_hash) and its ops.
std::string iteration_plan_hash(const std::string& serving_hash, const std::set<std::string>& ops);

}  // namespace memtwin
