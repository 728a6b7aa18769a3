// The held-out test set (issue 17): published training runs that no default or efficiency of
// memtwin was chosen against. The fit set is test_sim_validation.cpp's cases (the A100 runs the
// defaults were developed with, and the two llm-foundry H100 rows the pytorch-2023-hopper
// efficiencies were fitted on); nothing here is fitted. Every case prints predicted, published
// and error. The set is held to the targets: median error 15%, every case within 25%.
// Scenario files, with their sources and the assumptions where a publication is silent, are in
// scenarios/validation/held-out/; docs/validation.md lists them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/test_support.h"
#include "tests/unit/validation_helpers.h"

using memtwin::test::MegatronRow;
using memtwin::test::run_memtwin;
using memtwin::test::source_path;

namespace {

struct HeldOutCase {
  const char* label;
  const char* file;  // under scenarios/validation/held-out/
  std::vector<std::string> sets;
  double published_step_s = 0;       // a published step time, or
  double published_tflops = 0;       // published TFLOP/s per GPU (same FLOP count as time.tflops_per_gpu)
};

struct Outcome {
  double predicted_step_s = 0, error = 0;
};

Outcome evaluate(const HeldOutCase& c) {
  const std::string file = std::string("scenarios/validation/held-out/") + c.file;
  std::vector<std::string> args = {"run", source_path(file), "--backend", "sim", "--json"};
  for (const auto& s : c.sets) args.insert(args.end(), {"--set", s});
  const auto r = run_memtwin(args);
  INFO(c.label << ": " << r.err);
  REQUIRE((r.exit_code == 0 || r.exit_code == 3));  // 3: the memory model says it does not fit
  const auto doc = nlohmann::json::parse(r.out);
  const auto& time = doc["time"];
  Outcome o;
  o.predicted_step_s = time["step_s"].get<double>();
  // A TFLOP/s figure is a step time through the FLOP count: step = FLOPs / (GPUs x TFLOP/s).
  const double published = c.published_step_s > 0
                               ? c.published_step_s
                               : o.predicted_step_s * time["tflops_per_gpu"].get<double>() / c.published_tflops;
  o.error = (o.predicted_step_s - published) / published;
  WARN(c.label << ": predicted " << o.predicted_step_s << " s, published " << published << " s, error "
               << 100 * o.error << "%"
               << (doc["memory"]["gpu"]["fits"].get<bool>() ? "" : " (the memory model puts it over the GPU's memory)"));
  memtwin::test::check_residual(c.label, "test", file, c.sets, o.error);
  return o;
}

const std::vector<std::string> k70bAt2048 = {"cluster.nodes=256", "training.global_batch=4096"};
const std::vector<std::string> kGpt3At2048 = {"cluster.nodes=256", "training.global_batch=4096"};
const std::vector<std::string> kMaxTextAt2048 = {"cluster.nodes=256", "training.global_batch=4096",
                                                 "training.sharding.mode=hybrid_shard", "training.sharding.shard_group=128"};

std::vector<HeldOutCase> held_out_cases() {
  return {
      {"DGXC Llama 3.1 8B, 8 H100, CP 2", "dgxc-llama3.1-8b-cp2-8xh100.yaml", {}, 12.91},
      {"DGXC Llama 3.1 70B, 64 H100, TP 4 PP 4 CP 2", "dgxc-llama3.1-70b-cp2-h100.yaml", {}, 14.72},
      {"DGXC Llama 3.1 70B, 2,048 H100", "dgxc-llama3.1-70b-cp2-h100.yaml", k70bAt2048, 14.98},
      {"DGXC Llama 3.1 405B, 576 H100, TP 8 PP 9 CP 2", "dgxc-llama3.1-405b-cp2-h100.yaml", {}, 17.20},
      {"DGXC Llama 3.1 405B, 2,304 H100",
       "dgxc-llama3.1-405b-cp2-h100.yaml",
       {"cluster.nodes=288", "training.global_batch=1008"},
       17.62},
      {"NeMo GPT-3 175B, 128 H100, TP 4 PP 8", "nemo-gpt3-175b-h100.yaml", {}, 8.309},
      {"NeMo GPT-3 175B, 2,048 H100", "nemo-gpt3-175b-h100.yaml", kGpt3At2048, 8.49},
      {"MaxText Llama 2 70B, FSDP 64 H100", "maxtext-llama2-70b-fsdp-h100.yaml", {}, 6.999},
      {"MaxText Llama 2 70B, FSDP 256 H100",
       "maxtext-llama2-70b-fsdp-h100.yaml",
       {"cluster.nodes=32", "training.global_batch=512"},
       7.153},
      {"MaxText Llama 2 70B, FSDP 128 x DP 4 (512 H100)",
       "maxtext-llama2-70b-fsdp-h100.yaml",
       {"cluster.nodes=64", "training.global_batch=1024", "training.sharding.mode=hybrid_shard",
        "training.sharding.shard_group=128"},
       7.091},
      {"MaxText Llama 2 70B, FSDP 128 x DP 8 (1,024 H100)",
       "maxtext-llama2-70b-fsdp-h100.yaml",
       {"cluster.nodes=128", "training.global_batch=2048", "training.sharding.mode=hybrid_shard",
        "training.sharding.shard_group=128"},
       7.084},
      {"MaxText Llama 2 70B, FSDP 128 x DP 16 (2,048 H100)", "maxtext-llama2-70b-fsdp-h100.yaml", kMaxTextAt2048, 7.066},
      // llm-foundry's H100 table (MPT, FSDP full shard, one node, 2023 software): tokens/s as a step
      // time; its 7B rows are the fit set of pytorch-2023-hopper.
      {"llm-foundry MPT-13B, 8 H100, seq 2048", "mpt-13b-seq2k-h100.yaml", {}, 16 * 2048 / 38336.0},
      {"llm-foundry MPT-13B, 8 H100, seq 4096, full recompute", "mpt-13b-seq4k-h100.yaml", {}, 240 * 4096 / 37740.0},
      {"llm-foundry MPT-30B, 8 H100, seq 2048, full recompute", "mpt-30b-seq2k-h100.yaml", {}, 504 * 2048 / 16022.0},
      {"Llama 3 405B, 8,192 H100, TP 8 PP 16 DP 64", "llama3-405b-meta-h100.yaml", {}, 0, 430},
      {"Llama 3 405B, 16,384 H100, DP 128", "llama3-405b-meta-h100.yaml", {"cluster.nodes=2048"}, 0, 400},
      {"Llama 3 405B, 16,384 H100, CP 16, sequence 131,072",
       "llama3-405b-meta-h100.yaml",
       {"cluster.nodes=2048", "training.seq_len=131072", "training.global_batch=128", "training.parallelism.context=16"},
       0,
       380},
      // Narayanan et al. Table 2: ZeRO-3 without model parallelism, one global batch from 384 to
      // 1,536 GPUs (strong scaling). Its stack's efficiencies were fitted on the table's 530B rows.
      {"Megatron ZeRO-3 175B / 384 GPUs", "megatron-zero3-175b-a100.yaml", {},
       MegatronRow{1536, 96, 12288, 384, 144}.iteration_s()},
      {"Megatron ZeRO-3 175B / 768 GPUs", "megatron-zero3-175b-a100.yaml", {"cluster.nodes=96", "training.micro_batch=2"},
       MegatronRow{1536, 96, 12288, 768, 88}.iteration_s()},
      {"Megatron ZeRO-3 175B / 1536 GPUs", "megatron-zero3-175b-a100.yaml", {"cluster.nodes=192", "training.micro_batch=1"},
       MegatronRow{1536, 96, 12288, 1536, 44}.iteration_s()},
  };
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

TEST_CASE("held-out published runs: median error within 15%, every case within 25%", "[validation]") {
  std::vector<double> errors;
  std::map<std::string, double> step_of;
  for (const HeldOutCase& c : held_out_cases()) {
    const Outcome o = evaluate(c);
    errors.push_back(std::fabs(o.error));
    step_of[c.label] = o.predicted_step_s;
    CHECK(std::fabs(o.error) <= 0.25);
  }
  const double typical = median(errors);
  WARN("held-out set: " << errors.size() << " cases, median |error| " << 100 * typical << "%, max "
                        << 100 * *std::max_element(errors.begin(), errors.end()) << "%");
  CHECK(errors.size() >= 12);
  CHECK(typical <= 0.15);

  // Weak scaling as published: 32x (16x) the GPUs and the global batch leave the step time
  // within a few percent (DGXC: 14.72 -> 14.98 s, 8.309 -> 8.49 s; MaxText 6.999 -> 7.066 s).
  // The simulated growth is held within 3 points of the published growth.
  const struct {
    const char* small;
    const char* large;
    double published_growth;
  } trends[] = {{"DGXC Llama 3.1 70B, 64 H100, TP 4 PP 4 CP 2", "DGXC Llama 3.1 70B, 2,048 H100", 14.98 / 14.72},
                {"NeMo GPT-3 175B, 128 H100, TP 4 PP 8", "NeMo GPT-3 175B, 2,048 H100", 8.49 / 8.309},
                {"MaxText Llama 2 70B, FSDP 64 H100", "MaxText Llama 2 70B, FSDP 128 x DP 16 (2,048 H100)", 7.066 / 6.999}};
  for (const auto& t : trends) {
    const double growth = step_of.at(t.large) / step_of.at(t.small);
    INFO(t.large << ": simulated growth " << growth << ", published " << t.published_growth);
    CHECK(std::fabs(growth - t.published_growth) <= 0.03);
  }

  // Strong scaling of a communication-bound sharded run as published: ZeRO-3 over 4x the GPUs at
  // one global batch made the 175B step only 18% shorter (144 -> 44 TFLOP/s per GPU), since every
  // GPU still gathers and reduces the whole model once per micro-batch. The simulated ratio is
  // held within 25% of the published one, the tolerance each step time has; without its stack's
  // collective efficiency the model puts it at 0.36, ideal strong scaling at 0.25.
  const double published_ratio = (384.0 * 144) / (1536.0 * 44);
  const double ratio = step_of.at("Megatron ZeRO-3 175B / 1536 GPUs") / step_of.at("Megatron ZeRO-3 175B / 384 GPUs");
  WARN("ZeRO-3 175B strong scaling, 384 -> 1,536 GPUs: step ratio simulated " << ratio << ", published " << published_ratio);
  CHECK(std::fabs(ratio - published_ratio) / published_ratio <= 0.25);
}
