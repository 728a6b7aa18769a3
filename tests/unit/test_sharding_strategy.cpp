// The sharding-strategy descriptor: the one place that says what a strategy shards, gathers and
// keeps as buckets, held against the closed-form memory model and the training plan that ask it.
#include <catch2/catch.hpp>

#include <algorithm>

#include "models/memory/rank_share.h"
#include "models/memory/sharding_strategy.h"
#include "models/memory/training_buffers.h"
#include "models/memory/training_memory.h"
#include "models/plan/training_plan.h"
#include "models/scenario_loader.h"
#include "tests/test_support.h"
#include "tests/unit/sim_helpers.h"

using namespace memtwin;
using test::kNode;
using test::sim_run;
using test::source_path;
using test::write_scenario;

namespace {

const std::vector<std::vector<std::string>> kStrategies = {
    {"training.framework=deepspeed"},  // DDP under DeepSpeed: a bucket per gradient
    {"training.framework=fsdp"},
    {"training.framework=deepspeed", "training.sharding.strategy=zero", "training.sharding.stage=1"},
    {"training.framework=deepspeed", "training.sharding.strategy=zero", "training.sharding.stage=2"},
    {"training.framework=deepspeed", "training.sharding.strategy=zero", "training.sharding.stage=3"},
    {"training.framework=deepspeed", "training.sharding.strategy=zero", "training.sharding.stage=3",
     "training.sharding.reduce_bucket_size=1e7"},
    {"training.framework=fsdp", "training.sharding.strategy=fsdp"},
    {"training.framework=fsdp", "training.sharding.strategy=fsdp", "training.sharding.mode=shard_grad_op"},
    {"training.framework=megatron", "training.sharding.strategy=zero", "training.sharding.stage=1"},
};

Bytes allocated(const Program& program, const std::string& tensor) {
  const auto it = std::find_if(program.ops.begin(), program.ops.end(),
                               [&](const Op& op) { return op.kind == OpKind::alloc && op.tensor == tensor; });
  return it == program.ops.end() ? Bytes(-1) : it->size;
}

}  // namespace

TEST_CASE("every bucket a sharding strategy keeps is allocated by the plan and counted by the closed form", "[unit]") {
  const std::string file = write_scenario("sharding-buckets", kNode);
  int with_buckets = 0;
  for (const auto& sets : kStrategies) {
    INFO(sets.back());
    const Scenario s = load_scenario_file(file, sets).scenario;
    const RankShare share = rank_share(s.model, *s.training);
    const ShardingDescriptor d = describe_sharding(s, share, data_parallel_size(s.cluster, *s.training));
    const Plan plan = build_training_plan(s);
    for (const PersistentBuffer& b : d.persistent_buffers) {
      for (const Program& program : plan.programs) CHECK(allocated(program, b.tensor) == b.size);
    }
    // The plan's persistent bytes are the runtime, the model states and the buckets; the closed
    // form's buffers hold the buckets and whatever the strategy gathers on top.
    const TrainingMemory m = training_memory(s);
    CHECK(plan.persistent_bytes == m.runtime + m.model_states() + d.persistent_bytes());
    CHECK(m.buffers >= d.persistent_bytes());
    if (!d.persistent_buffers.empty()) ++with_buckets;
  }
  // All but FSDP full shard's and Megatron's, whose buffers are the gathered units or main_grad;
  // shard_grad_op's is its unsharded parameters.
  CHECK(with_buckets == 7);
}

TEST_CASE("DeepSpeed ZeRO-3's contiguous-gradients bucket is reduce_bucket_size elements of the parameters' dtype",
          "[unit]") {
  const std::string file = write_scenario("sharding-ipg", kNode);
  const std::vector<std::string> zero3 = {"training.framework=deepspeed", "training.sharding.strategy=zero",
                                          "training.sharding.stage=3"};
  auto bucket = [&](std::vector<std::string> sets) {
    sets.insert(sets.end(), zero3.begin(), zero3.end());
    const Scenario s = load_scenario_file(file, sets).scenario;
    const ShardingDescriptor d =
        describe_sharding(s, rank_share(s.model, *s.training), data_parallel_size(s.cluster, *s.training));
    REQUIRE(d.persistent_buffers.size() == 1);
    CHECK(d.persistent_buffers.front().tensor == "zero.reduce_bucket");
    CHECK(d.gathers_parameters);
    return d.persistent_buffers.front().size.as_double();
  };
  CHECK(bucket({}) == 5e8 * 2);  // DeepSpeed's default, 16-bit parameters: 1 GB whatever the model
  CHECK(bucket({"training.precision=fp32"}) == 5e8 * 4);
  CHECK(bucket({"training.sharding.reduce_bucket_size=16777216"}) == 16777216.0 * 2);
}

TEST_CASE("a MoE run with expert parallelism: the simulated peak equals the closed form byte for byte where no "
          "parameters are gathered",
          "[unit]") {
  // DDP, ZeRO-1/2, Megatron's distributed optimizer and FSDP's no_shard and shard_grad_op (whose
  // parameters are unsharded through the step) hold the same tensors all step long, so the
  // timeline's peak is the closed form's sum: the states, the buckets, the stored activations and
  // the working block, and one NCCL buffer per communicator -- the expert-parallel one included.
  const std::string moe = source_path("scenarios/host/train-moe-ep2-2ranks.yaml");
  const std::vector<std::vector<std::string>> strategies = {
      {"training.sharding={strategy: ddp}"},
      {"training.sharding.stage=1"},
      {"training.sharding.stage=2"},
      {"training.sharding.stage=2", "training.micro_batch=2"},
      {"training.framework=megatron", "training.sharding.stage=1"},
      {"training.framework=fsdp", "training.sharding={strategy: fsdp, mode: no_shard}"},  // fp32: no cast copies
      {"training.framework=fsdp", "training.sharding={strategy: fsdp, mode: shard_grad_op}"},
  };
  for (const auto& sets : strategies) {
    INFO(sets.back());
    const Scenario s = load_scenario_file(moe, sets).scenario;
    REQUIRE(s.training->parallelism.expert == 2);
    REQUIRE(communicators_per_gpu(s) == 2);  // data parallel and expert parallel
    const nlohmann::json simulated = sim_run(moe, sets)["memory"]["gpu"];
    const TrainingMemory closed = training_memory(s);
    CHECK(simulated["peak_bytes"].get<std::int64_t>() == closed.peak.count());
    CHECK(simulated["breakdown_bytes"]["runtime"].get<std::int64_t>() == closed.runtime.count());
    CHECK(simulated["breakdown_bytes"]["buffers"].get<std::int64_t>() == closed.buffers.count());
  }
}

TEST_CASE("a MoE run under ZeRO-3: the simulated peak is within 5% of the closed form and never above it", "[unit]") {
  // The closed form sums each kind's maximum; the simulated timeline reaches them at different
  // moments, so it may be lower, never higher. Both count the same reduce bucket.
  const std::string moe = source_path("scenarios/host/train-moe-ep2-2ranks.yaml");
  for (const std::vector<std::string>& sets :
       {std::vector<std::string>{}, {"training.sharding.reduce_bucket_size=5e7"}}) {
    INFO((sets.empty() ? "scenario's bucket" : sets.front()));
    const double simulated = sim_run(moe, sets)["memory"]["gpu"]["peak_bytes"].get<double>();
    const double closed = training_memory(load_scenario_file(moe, sets).scenario).peak.as_double();
    CHECK(simulated <= closed);
    CHECK(simulated >= 0.95 * closed);
  }
}

TEST_CASE("FSDP full shard: the plan holds a block's unsharded gradient until its reduce-scatter, as the closed form counts",
          "[unit]") {
  const std::string file = write_scenario("sharding-fsdp", kNode);
  const std::vector<std::string> sets = {"training.framework=fsdp", "training.sharding.strategy=fsdp"};
  const Scenario s = load_scenario_file(file, sets).scenario;
  const ShardingDescriptor d =
      describe_sharding(s, rank_share(s.model, *s.training), data_parallel_size(s.cluster, *s.training));
  REQUIRE(d.unsharded_block_gradient);
  const Plan plan = build_training_plan(s);
  const Program& program = plan.programs.front();
  int gradients = 0;
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const Op& op = program.ops[i];
    if (op.kind != OpKind::free || op.tensor.find(".grads") == std::string::npos) continue;
    ++gradients;
    // Freed only after the block's gradient reduce-scatter.
    const bool after_reduce = std::any_of(op.deps.begin(), op.deps.end(), [&](std::uint32_t dep) {
      return program.ops[dep].kind == OpKind::collective && program.ops[dep].collective == Collective::reduce_scatter;
    });
    CHECK(after_reduce);
  }
  CHECK(gradients == s.model.layers * s.training->global_batch / (s.training->micro_batch * 8));
  const double simulated = sim_run(file, sets)["memory"]["gpu"]["peak_bytes"].get<double>();
  const double closed = training_memory(s).peak.as_double();
  CHECK(simulated <= closed);
  CHECK(simulated >= 0.95 * closed);
}
