// Published step times the simulator is held to (issue 4: within 15%, efficiencies not tuned per
// case: every A100 case runs on the catalog's a100-80gb with the default efficiencies; the two H100
// rows at the end are the fit set of the efficiencies their 2023 software stack is given). Each case
// prints its error. Cases whose simulation takes tens of seconds are tagged [slow]: CI runs them
// too, and scripts/validate-slow.sh runs them alone.
#include <catch2/catch.hpp>

#include <cmath>

#include <nlohmann/json.hpp>

#include "tests/test_support.h"
#include "tests/unit/validation_helpers.h"

using memtwin::test::run_memtwin;
using memtwin::test::source_path;

namespace {

double simulated_step(const std::string& scenario, const std::vector<std::string>& sets = {}) {
  std::vector<std::string> args = {"run", source_path(scenario), "--backend", "sim", "--json"};
  for (const auto& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  auto r = run_memtwin(args);
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.out)["time"]["step_s"].get<double>();
}

// Simulates the case, prints and checks its error, and checks its stored residual (the fit set's
// entries in scenarios/presets/validated-errors.yaml).
void check_error(const std::string& label, const std::string& file, const std::vector<std::string>& sets,
                 double predicted, double published) {
  const double error = (predicted - published) / published;
  WARN(label << ": predicted " << predicted << " s, published " << published << " s, error " << 100 * error << "%");
  CHECK(std::fabs(error) <= 0.15);
  memtwin::test::check_residual(label, "fit", file, sets, error);
}

void check_case(const std::string& label, const std::string& file, const std::vector<std::string>& sets,
                double published) {
  check_error(label, file, sets, simulated_step(file, sets), published);
}

using memtwin::test::MegatronRow;

const std::vector<std::string> kFast = {"simulation.fidelity=fast"};

}  // namespace

const std::vector<std::string> kSelective = {"training.activation_checkpointing=selective",
                                             "training.parallelism.sequence_parallel=true"};

TEST_CASE("Korthikanti et al. Table 5: the 22B GPT on 8 A100s", "[validation]") {
  const char* file = "scenarios/validation/korthikanti-22b-a100.yaml";
  check_case("22B full recompute", file, {}, 1.42);
  check_case("22B selective recompute + sequence parallel", file, kSelective, 1.10);
}

TEST_CASE("Korthikanti et al. Table 5: the 175B GPT on 64 A100s (pipeline 8, interleaved)", "[validation]") {
  const char* file = "scenarios/validation/korthikanti-175b-a100.yaml";
  check_case("175B full recompute", file, {}, 18.13);
  check_case("175B selective recompute + sequence parallel", file, kSelective, 13.75);
}

// 280 simulated ranks with 280 micro-batches each: about 17 s per case.
TEST_CASE("Korthikanti et al. Table 5: the 530B GPT on 280 A100s (pipeline 35, interleaved)", "[validation][slow]") {
  const char* file = "scenarios/validation/korthikanti-530b-a100.yaml";
  check_case("530B full recompute", file, {}, 49.05);
  check_case("530B selective recompute + sequence parallel", file, kSelective, 37.83);
}

// 512 simulated ranks with 512 micro-batches each: about 40 s per case on one core.
TEST_CASE("Korthikanti et al. Table 5: the 1T GPT on 512 A100s (pipeline 64)", "[validation][slow]") {
  const char* file = "scenarios/validation/korthikanti-1t-a100.yaml";
  check_case("1T full recompute", file, {}, 94.42);
  check_case("1T selective recompute + sequence parallel", file, kSelective, 71.49);
}

TEST_CASE("Megatron-LM Table 1: the 1.7B GPT, data parallel over 32 A100s", "[validation]") {
  check_case("Megatron 1.7B / 32 GPUs", "scenarios/validation/megatron-1.7b-a100.yaml", {},
             MegatronRow{512, 24, 2304, 32, 137}.iteration_s());
}

TEST_CASE("Megatron-LM Table 1: the 18.4B GPT, tensor 8 x data 32 on 256 A100s", "[validation]") {
  check_case("Megatron 18.4B / 256 GPUs", "scenarios/validation/megatron-18.4b-a100.yaml", kFast,
             MegatronRow{1024, 40, 6144, 256, 135}.iteration_s());
}

// Fidelity fast: two of each stage's 24 nodes simulated (128 ranks), about 5 s.
TEST_CASE("Megatron-LM Table 1: the 145.6B GPT, tensor 8 x pipeline 8 x data 24 on 1,536 A100s", "[validation]") {
  check_case("Megatron 145.6B / 1536 GPUs", "scenarios/validation/megatron-145.6b-a100.yaml", kFast,
             MegatronRow{2304, 80, 12288, 1536, 148}.iteration_s());
}

// Fidelity fast still simulates 1,024 ranks (two nodes of each of 64 stages) with 512 micro-batches
// each: about a minute.
TEST_CASE("Megatron-LM Table 1: the 1T GPT, tensor 8 x pipeline 64 x data 6 on 3,072 A100s", "[validation][slow]") {
  check_case("Megatron 1T / 3072 GPUs", "scenarios/validation/megatron-1t-a100.yaml", kFast,
             MegatronRow{3072, 128, 25600, 3072, 163}.iteration_s());
}

// PyTorch FSDP (FULL_SHARD) as MosaicML's llm-foundry measured it on A100-80GB nodes with
// 1600 Gbps RoCE: the published step time is global batch x sequence / tokens per second.
namespace {
struct MptRow {
  const char* name;
  double global_batch, seq_len, tokens_per_s, parameters;
};
}  // namespace

TEST_CASE("llm-foundry MPT benchmarks: FSDP full sharding on 8 and 64 A100s", "[validation]") {
  const MptRow rows[] = {{"7b-seq2k", 96, 2048, 37130, 6658859008},   {"13b-seq2k", 48, 2048, 18097, 12853954560},
                         {"13b-seq4k", 240, 4096, 16482, 12864440320}, {"7b-seq8k", 128, 8192, 25655, 6684024832},
                         {"30b-seq2k", 504, 2048, 7330, 29975214080},  {"70b-seq2k", 2048, 2048, 26274, 64862437376}};
  for (const MptRow& row : rows) {
    const std::string file = std::string("scenarios/validation/mpt-") + row.name + "-a100.yaml";
    auto r = run_memtwin({"run", source_path(file), "--backend", "sim", "--json", "--set", "simulation.fidelity=fast"});
    REQUIRE(r.exit_code == 0);
    const auto doc = nlohmann::json::parse(r.out);
    // The architecture is the benchmark's: the parameter count matches the table's to the unit.
    CHECK(doc["model"]["parameters"].get<double>() == row.parameters);
    check_error(std::string("MPT-") + row.name, file, {"simulation.fidelity=fast"}, doc["time"]["step_s"].get<double>(),
                row.global_batch * row.seq_len / row.tokens_per_s);
  }
}

// The same benchmark table's H100 rows, run with 2023 software: its MPT-7B rows at sequence 2048
// and 8192 are what the pytorch-2023-hopper efficiencies (scenarios/presets/efficiency.yaml) were
// fitted on, so they match by construction; the table's other H100 rows are held out
// (test_held_out_validation.cpp).
TEST_CASE("llm-foundry MPT benchmarks on 8 H100s: the fit set of the pytorch-2023-hopper efficiencies", "[validation]") {
  check_case("llm-foundry MPT-7B, 8 H100, seq 2048", "scenarios/validation/mpt-7b-seq2k-h100.yaml", {}, 48 * 2048 / 85144.0);
  check_case("llm-foundry MPT-7B, 8 H100, seq 8192, full recompute", "scenarios/validation/mpt-7b-seq8k-h100.yaml", {},
             128 * 8192 / 55481.0);
}

// Narayanan et al. Table 2, ZeRO-3 without model parallelism (DeepSpeed inside Megatron-LM, early
// 2021): its 530B rows are the fit set of the deepspeed-2021-ampere efficiencies (their sharded
// collectives' share of the bandwidth NCCL's model gives), which its 175B rows test
// (test_held_out_validation.cpp).
TEST_CASE("Megatron-LM Table 2: the 530B GPT under ZeRO-3 on 640-2,240 A100s, fit set of deepspeed-2021-ampere",
          "[validation]") {
  const std::string file = "scenarios/validation/megatron-zero3-530b-a100.yaml";
  check_case("Megatron ZeRO-3 530B / 640 GPUs", file, {}, MegatronRow{2560, 105, 20480, 640, 138}.iteration_s());
  const std::vector<std::string> at1120 = {"cluster.nodes=140", "training.global_batch=2240", "training.micro_batch=2"};
  check_case("Megatron ZeRO-3 530B / 1120 GPUs", file, at1120, MegatronRow{2240, 105, 20480, 1120, 98}.iteration_s());
  const std::vector<std::string> at2240 = {"cluster.nodes=280", "training.global_batch=2240", "training.micro_batch=1"};
  check_case("Megatron ZeRO-3 530B / 2240 GPUs", file, at2240, MegatronRow{2240, 105, 20480, 2240, 48}.iteration_s());
}
