// training.deepspeed_config: a DeepSpeed ds_config.json read into training keys, beneath the
// scenario's own; "auto" left to the scenario; bad values refused at their line in the file.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "models/memory/training_memory.h"
#include "models/scenario_loader.h"
#include "tests/test_support.h"

using namespace memtwin;
using test::run_memtwin;
using test::source_path;
namespace fs = std::filesystem;

namespace {

const std::string kExample = "scenarios/training/llama2-70b-ds-config-64xh100.yaml";

// A scenario on 8 H100s reading `config` (written to a temporary file), with `extra` training keys.
Scenario with_config(const std::string& config, const std::string& extra = "") {
  const fs::path dir = fs::temp_directory_path() / "memtwin-ds-config";
  fs::create_directories(dir);
  std::ofstream(dir / "ds.json") << config;
  const std::string scenario = "name: ds\ncluster: {gpus_per_node: 8, gpu: h100-sxm}\nmodel: llama-2-7b\n"
                               "training: {deepspeed_config: ds.json, seq_len: 2048" + extra + "}\n";
  return load_scenario_text(scenario, (dir / "scenario.yaml").string(), dir.string()).scenario;
}

test::ProcessResult check_config(const std::string& config, const std::string& extra = "") {
  const fs::path dir = fs::temp_directory_path() / "memtwin-ds-config-bad";
  fs::create_directories(dir);
  std::ofstream(dir / "ds.json") << config;
  std::ofstream(dir / "scenario.yaml") << "name: ds\ncluster: {gpus_per_node: 8, gpu: h100-sxm}\nmodel: llama-2-7b\n"
                                          "training: {deepspeed_config: ds.json, seq_len: 2048" + extra + "}\n";
  return run_memtwin({"check", (dir / "scenario.yaml").string()});
}

}  // namespace

TEST_CASE("a ds_config.json gives the training keys it sets: stage, offload, buckets, batch, precision, optimizer", "[unit]") {
  const Scenario s = load_scenario_file(source_path(kExample)).scenario;
  const Training& t = *s.training;
  CHECK(t.framework == Framework::deepspeed);
  CHECK(t.sharding.strategy == ShardingStrategy::zero);
  CHECK(t.sharding.zero_stage == 3);
  CHECK(t.offload.optimizer == OffloadTarget::cpu);
  CHECK(t.offload.parameters == OffloadTarget::none);
  CHECK(t.offload.pin_memory);
  CHECK(t.global_batch == 1024);
  CHECK(t.micro_batch == 1);
  CHECK(t.precision == Precision::bf16);
  CHECK(t.optimizer == Optimizer::adamw);
  CHECK(t.sharding.deepspeed.reduce_bucket_size == 67108864);
  CHECK(t.sharding.deepspeed.prefetch_bucket_size == 60397977);
  CHECK(t.sharding.deepspeed.param_persistence_threshold == 81920);
  CHECK(t.sharding.deepspeed.max_live_parameters == 1e9);
  // The same run written out as scenario keys predicts the same memory.
  const std::string explicit_keys =
      "name: explicit\ncluster: {nodes: 8, gpus_per_node: 8, gpu: h100-sxm, host: {memory: 2TiB}}\nmodel: llama-2-70b\n"
      "training:\n  framework: deepspeed\n  global_batch: 1024\n  micro_batch: 1\n  seq_len: 4096\n  precision: bf16\n"
      "  optimizer: adamw\n  activation_checkpointing: full\n  offload: {optimizer: cpu, parameters: none, pin_memory: true}\n"
      "  sharding: {strategy: zero, stage: 3, reduce_bucket_size: 67108864, prefetch_bucket_size: 60397977,\n"
      "             param_persistence_threshold: 81920, max_live_parameters: 1e9, sub_group_size: 1e9}\n";
  const Scenario e = load_scenario_text(explicit_keys, "<explicit>", "").scenario;
  CHECK(training_memory(s).peak.count() == training_memory(e).peak.count());
}

TEST_CASE("the scenario's own training keys win over the ds_config's", "[unit]") {
  const Scenario s = load_scenario_file(source_path(kExample), {"training.sharding.stage=2", "training.micro_batch=2"}).scenario;
  CHECK(s.training->sharding.zero_stage == 2);
  CHECK(s.training->micro_batch == 2);
  CHECK(s.training->offload.optimizer == OffloadTarget::cpu);  // still the file's
}

TEST_CASE("a ds_config's \"auto\" values (the HF Trainer's) are left to the scenario, and no bf16 or fp16 section means fp32", "[unit]") {
  const Scenario hf = with_config(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
      "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"},
      "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto", "offload_optimizer": {"device": "cpu"}}})",
                                  ", global_batch: 64, micro_batch: 4, precision: bf16");
  CHECK(hf.training->global_batch == 64);
  CHECK(hf.training->micro_batch == 4);
  CHECK(hf.training->precision == Precision::bf16);
  CHECK(hf.training->sharding.zero_stage == 2);
  CHECK(hf.training->sharding.deepspeed.reduce_bucket_size == 5e8);  // DeepSpeed's default
  const Scenario plain = with_config(R"({"train_batch_size": 32, "zero_optimization": {"stage": 0}})");
  CHECK(plain.training->precision == Precision::fp32);  // DeepSpeed's own default
  CHECK(plain.training->sharding.strategy == ShardingStrategy::ddp);
  CHECK(plain.training->global_batch == 32);
}

TEST_CASE("a ds_config.json is refused at the line of what cannot be read, naming the field", "[unit]") {
  const auto stage = check_config("{\n  \"train_batch_size\": 32,\n  \"zero_optimization\": {\n    \"stage\": 5\n  }\n}\n");
  CHECK(stage.exit_code == 2);
  CHECK_THAT(stage.err, Catch::Contains("ds.json:4: 'zero_optimization.stage' must be 0, 1, 2 or 3"));
  const auto device = check_config(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "disk"}}})");
  CHECK(device.exit_code == 2);
  CHECK_THAT(device.err, Catch::Contains("'zero_optimization.offload_param.device' must be none, cpu or nvme"));
  const auto accumulation = check_config(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8})");
  CHECK(accumulation.exit_code == 2);
  CHECK_THAT(accumulation.err, Catch::Contains("give train_batch_size"));
  const auto optimizer = check_config(R"({"train_batch_size": 32, "optimizer": {"type": "Lamb"}})");
  CHECK(optimizer.exit_code == 2);
  CHECK_THAT(optimizer.err, Catch::Contains("'Lamb' is not modelled"));
  const auto json = check_config("{\"train_batch_size\": 32,\n \"zero_optimization\": {\"stage\": 3,}\n");
  CHECK(json.exit_code == 2);
  CHECK_THAT(json.err, Catch::Contains("not valid JSON"));
  const auto framework = check_config(R"({"train_batch_size": 32})", ", framework: fsdp");
  CHECK(framework.exit_code == 2);
  CHECK_THAT(framework.err, Catch::Contains("training.framework") && Catch::Contains("DeepSpeed run"));
  const auto value = check_config(R"({"train_batch_size": -4})");
  CHECK(value.exit_code == 2);
  CHECK_THAT(value.err, Catch::Contains("ds.json") && Catch::Contains("training.global_batch"));
  const auto missing = run_memtwin({"check", source_path(kExample), "--set", "training.deepspeed_config=no-such.json"});
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::Contains("file not found"));
}
