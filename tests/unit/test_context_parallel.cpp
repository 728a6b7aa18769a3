// Context parallelism (training.parallelism.context): each sequence split over the context ranks,
// which hold the same weights, gather each block's keys and values for attention (Llama 3's
// all-gather form) and reduce-scatter their gradients; gradients reduce over data x context ranks.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "models/memory/activations.h"
#include "models/memory/rank_share.h"
#include "models/memory/training_memory.h"
#include "models/plan/training_plan.h"
#include "models/scenario_loader.h"
#include "tests/test_support.h"
#include "tests/unit/sim_helpers.h"

using namespace memtwin;
using test::sim_run;
using test::write_scenario;

namespace {

// Eight GPUs of one node, tensor 2: context 2 leaves data parallel 2.
const std::string kLongSequences = R"(
name: context-parallel
cluster: {nodes: 1, gpus_per_node: 8, gpu: h100-sxm}
model: llama-2-7b
training:
  micro_batch: 1
  seq_len: 8192
  global_batch: 16
  parallelism: {tensor: 2, sequence_parallel: true}
  sharding: {strategy: zero, stage: 1}
  activation_checkpointing: none
)";

Scenario load(const std::vector<std::string>& sets) {
  return load_scenario_file(write_scenario("context-parallel", kLongSequences), sets).scenario;
}

// The key/value bytes one block gathers: 2 (K and V) x sequence x KV heads per tensor rank x head
// dimension x 2 bytes (Llama 2 7B: 32 KV heads of 128 over tensor 2).
constexpr double kGatheredKv = 2.0 * 8192 * 16 * 128 * 2;

}  // namespace

TEST_CASE("context parallelism halves each rank's tokens and doubles its micro-batches", "[unit]") {
  const Scenario one = load({});
  const Scenario two = load({"training.parallelism.context=2"});
  const TrainingMemory m1 = training_memory(one), m2 = training_memory(two);
  CHECK(m2.gradient_accumulation == 2 * m1.gradient_accumulation);
  // ZeRO-1 shards over every rank holding the same weights: data x context = 4 either way.
  CHECK(m1.data_parallel == 4);
  CHECK(m2.data_parallel == 4);
  CHECK(batch_shards(two.cluster, *two.training) == 2);
  const RankShare share = rank_share(one.model, *one.training);
  CHECK(training_activations(two, share).stored.as_double() ==
        Approx(training_activations(one, share).stored.as_double() / 2).epsilon(1e-6));
  CHECK(context_gathered_kv_bytes(two.model, *two.training) == kGatheredKv);
  CHECK(context_gathered_kv_bytes(one.model, *one.training) == 0);
}

TEST_CASE("the plan groups context ranks after tensor ranks and exchanges keys and values per block", "[unit]") {
  const Scenario s = load({"training.parallelism.context=2"});
  const Plan plan = build_training_plan(s);
  // Megatron's order: tensor ranks adjacent, then context ranks.
  REQUIRE(plan.groups.at("cp").size() == 4);
  CHECK(plan.groups.at("cp")[0] == std::vector<int>{0, 2});
  CHECK(plan.groups.at("cp")[1] == std::vector<int>{1, 3});
  CHECK(plan.groups.at("dp")[0] == std::vector<int>{0, 2, 4, 6});
  int gathers = 0, scatters = 0;
  for (const Op& op : plan.programs[0].ops) {
    if (op.kind != OpKind::collective || op.role != "cp") continue;
    CHECK(op.stream == Stream::context);
    CHECK(op.bytes_total == kGatheredKv);
    gathers += op.collective == Collective::all_gather;
    scatters += op.collective == Collective::reduce_scatter;
  }
  const int block_passes = s.model.layers * 8;  // 8 micro-batches per step on each rank
  CHECK(gathers == 2 * block_passes);           // forward, and again for backward
  CHECK(scatters == block_passes);              // the keys' and values' gradients
}

TEST_CASE("simulated context parallelism moves the keys and values the model says, and peaks where it says",
          "[unit]") {
  const std::string file = write_scenario("context-parallel-sim", kLongSequences);
  const auto doc = sim_run(file, {"training.parallelism.context=2"});
  std::string ddp_text = kLongSequences;
  ddp_text.replace(ddp_text.find("{strategy: zero, stage: 1}"), 26, "{strategy: ddp}");
  ddp_text.replace(ddp_text.find(", sequence_parallel: true"), 25, "");  // tensor ranks all-reduce
  const auto ddp = sim_run(write_scenario("context-parallel-ddp", ddp_text), {"training.parallelism.context=2"});
  // With DDP and no sequence parallelism the only all-gathers and reduce-scatters are context
  // parallelism's: a ring of two
  // moves half of each buffer per rank.
  const double block_passes = 32.0 * 8;
  const auto& bytes = ddp["communication"]["bytes_per_gpu"];
  CHECK(bytes["all_gather"].get<double>() == Approx(2 * block_passes * kGatheredKv / 2).epsilon(1e-9));
  CHECK(bytes["reduce_scatter"].get<double>() == Approx(block_passes * kGatheredKv / 2).epsilon(1e-9));
  const TrainingMemory m = training_memory(load({"training.parallelism.context=2"}));
  CHECK(doc["memory"]["gpu"]["peak_bytes"].get<double>() == Approx(m.peak.as_double()).epsilon(0.01));
  // Half the tokens per rank and twice the micro-batches: the step costs about as much compute.
  const auto without = sim_run(file);
  CHECK(doc["time"]["compute_s"].get<double>() == Approx(without["time"]["compute_s"].get<double>()).epsilon(0.05));
}
