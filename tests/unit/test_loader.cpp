#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <limits>

#include "models/model_facts.h"
#include "models/scenario/yaml_limits.h"
#include "models/result.h"
#include "models/scenario_loader.h"
#include "models/schema.h"
#include "tests/test_support.h"

using namespace memtwin;

namespace {
std::vector<std::string> example_scenarios() {
  std::vector<std::string> out;
  for (const auto& f : test::files_under("scenarios", ".yaml")) {
    if (f.find("/presets/") == std::string::npos) out.push_back(f);
  }
  return out;
}

std::string write_temp(const std::string& name, const std::string& text) {
  auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path.string();
}
}  // namespace

TEST_CASE("every scenario under scenarios/ loads", "[unit]") {
  auto files = example_scenarios();
  REQUIRE_FALSE(files.empty());
  for (const auto& f : files) {
    INFO(f);
    CHECK_NOTHROW(load_scenario_file(f));
  }
}

TEST_CASE("presets fill the scenario and derived defaults follow the hardware", "[unit]") {
  LoadedScenario l = load_scenario_file(test::source_path("scenarios/quickstart.yaml"));
  const Cluster& c = l.scenario.cluster;
  CHECK(c.gpu.name == "h100-sxm");
  CHECK(c.gpu.memory.count() == 81559LL * 1024 * 1024);
  CHECK(c.gpu.flops.at(Precision::bf16).value() == Approx(989e12));
  CHECK(c.intra_node.fabric == Fabric::nvswitch);
  CHECK(c.intra_node.bandwidth.value() == Approx(450e9));  // the GPU's NVLink, per direction
  CHECK(c.inter_node.nics_per_node == 8);                  // one NIC per GPU by default
  CHECK(c.host.pcie_bandwidth.value() == Approx(64e9));    // the GPU's PCIe Gen5
  REQUIRE(l.scenario.training);
  CHECK(l.scenario.training->sharding.strategy == ShardingStrategy::fsdp);
  CHECK(l.scenario.model.layers == 32);
}

TEST_CASE("a preset can be partly overridden, also from the command line", "[unit]") {
  LoadedScenario l = load_scenario_file(test::source_path("scenarios/quickstart.yaml"),
                                        {"cluster.gpu.memory=96GiB", "training.micro_batch=1", "cluster.nodes=2"});
  CHECK(l.scenario.cluster.gpu.memory.count() == 96LL << 30);
  CHECK(l.scenario.cluster.gpu.hbm_bandwidth.value() == Approx(3.35e12));  // the rest of the preset stays
  CHECK(l.scenario.training->micro_batch == 1);
  CHECK(l.scenario.cluster.total_gpus() == 16);
  LoadedScenario swapped = load_scenario_file(test::source_path("scenarios/quickstart.yaml"), {"cluster.gpu=a100-80gb"});
  CHECK(swapped.scenario.cluster.gpu.name == "a100-80gb");
  CHECK(swapped.scenario.cluster.intra_node.bandwidth.value() == Approx(300e9));
}

TEST_CASE("a choice spelled as frameworks spell it (capitals, underscores) means the choice and resolves to its name", "[unit]") {
  LoadedScenario l = load_scenario_file(test::source_path("scenarios/quickstart.yaml"),
                                        {"training.sharding.mode=SHARD_GRAD_OP", "cluster.inter_node.topology=Fat_Tree",
                                         "cluster.collectives.algorithms=[RING, Tree]"});
  CHECK(l.scenario.training->sharding.fsdp_mode == FsdpMode::shard_grad_op);
  CHECK(l.scenario.cluster.inter_node.topology == Topology::fat_tree);
  CHECK(l.resolved["training"]["sharding"]["mode"] == "shard_grad_op");
  CHECK(l.resolved["cluster"]["inter_node"]["topology"] == "fat-tree");
  CHECK(l.resolved["cluster"]["collectives"]["algorithms"] == nlohmann::ordered_json::array({"ring", "tree"}));
  // Other letters are still refused, naming the choices.
  CHECK_THROWS_WITH(load_scenario_file(test::source_path("scenarios/quickstart.yaml"), {"training.sharding.mode=FULLSHARD"}),
                    Catch::Contains("is not one of full_shard | shard_grad_op"));
}

TEST_CASE("errors in --set overrides name the override", "[unit]") {
  try {
    load_scenario_file(test::source_path("scenarios/quickstart.yaml"), {"training.micro_batch=-2"});
    FAIL("expected an error");
  } catch (const ScenarioError& e) {
    CHECK(e.where().file == "--set training.micro_batch=-2");
    CHECK(e.key() == "training.micro_batch");
    CHECK_THAT(e.message(), Catch::Contains("at least 1"));
  }
  CHECK_THROWS_WITH(load_scenario_file(test::source_path("scenarios/quickstart.yaml"), {"training.seq_len"}),
                    Catch::Contains("expected KEY=VALUE"));
}

TEST_CASE("the resolved scenario is itself a scenario that resolves to the same thing", "[unit]") {
  for (const auto& f : example_scenarios()) {
    INFO(f);
    LoadedScenario first = load_scenario_file(f);
    // JSON is YAML: feed the echo back through the loader.
    LoadedScenario second = load_scenario_text(first.resolved.dump(), "<resolved>", std::filesystem::path(f).parent_path());
    CHECK(second.resolved == first.resolved);
  }
}

TEST_CASE("a HuggingFace config.json gives the same model as the catalog", "[unit]") {
  const std::string llama = R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 8192,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "vocab_size": 128256, "bos_token_id": 128000, "eos_token_id": 128001})";
  std::string config = write_temp("memtwin-llama3-config.json", llama);
  std::string scenario = "name: hf\ncluster: {gpu: h100-sxm}\nmodel: {hf_config: " + config +
                         "}\ntraining: {micro_batch: 1}\n";
  LoadedScenario from_hf = load_scenario_text(scenario, "<test>", "");
  ModelSpec catalog = catalog_model("llama-3-8b");
  CHECK(count_parameters(from_hf.scenario.model).total == count_parameters(catalog).total);
  CHECK(from_hf.scenario.model.kv_heads == 8);

  const std::string opt = R"({"model_type": "opt", "activation_function": "relu", "hidden_size": 5120,
    "ffn_dim": 20480, "num_attention_heads": 40, "num_hidden_layers": 40, "vocab_size": 50272,
    "max_position_embeddings": 2048, "word_embed_proj_dim": 5120, "do_layer_norm_before": true})";
  std::string opt_config = write_temp("memtwin-opt-config.json", opt);
  LoadedScenario from_opt = load_scenario_text(
      "name: hf\ncluster: {gpu: h100-sxm}\nmodel: {hf_config: " + opt_config + "}\ntraining: {micro_batch: 1}\n",
      "<test>", "");
  CHECK(count_parameters(from_opt.scenario.model).total == count_parameters(catalog_model("opt-13b")).total);
  CHECK(from_opt.scenario.model.tied_embeddings);
}

TEST_CASE("a bare parameter count is a model-states-only model", "[unit]") {
  LoadedScenario l = load_scenario_text(
      "name: p\ncluster: {gpu: a100-80gb}\nmodel: {parameters: 7.5e9}\ntraining: {micro_batch: 1}\n", "<test>", "");
  CHECK_FALSE(l.scenario.model.architecture_known);
  CHECK(count_parameters(l.scenario.model).total == Approx(7.5e9));
}

TEST_CASE("loading is deterministic", "[unit]") {
  auto a = load_scenario_file(test::source_path("scenarios/quickstart.yaml"));
  auto b = load_scenario_file(test::source_path("scenarios/quickstart.yaml"));
  CHECK(a.resolved.dump() == b.resolved.dump());
}

TEST_CASE("a null override removes a key, back to its default", "[unit]") {
  LoadedScenario l = load_scenario_file(test::source_path("scenarios/quickstart.yaml"), {"training.micro_batch=null"});
  CHECK(l.scenario.training->micro_batch == 1);  // the schema's default
  CHECK(l.resolved["training"]["micro_batch"] == 1);
}

TEST_CASE("a calibration file replaces the default efficiencies, unless the scenario says otherwise", "[unit]") {
  const std::string calib = test::source_path("calib/h200.yaml");
  LoadedScenario l = load_scenario_file(test::source_path("scenarios/quickstart.yaml"),
                                        {"cluster.gpu=h200", "cluster.calibration=" + calib});
  CHECK(l.scenario.cluster.efficiency.gemm == Approx(0.818));
  CHECK(l.scenario.cluster.efficiency.memory == Approx(0.891));
  CHECK(l.scenario.cluster.runtime.cuda_context.count() == 595LL << 20);
  CHECK(l.scenario.cluster.host.pcie_bandwidth.value() == Approx(55.3e9));
  LoadedScenario mine = load_scenario_file(test::source_path("scenarios/quickstart.yaml"),
                                           {"cluster.calibration=" + calib, "cluster.efficiency.gemm=0.5"});
  CHECK(mine.scenario.cluster.efficiency.gemm == 0.5);
  CHECK(mine.scenario.cluster.efficiency.memory == Approx(0.891));

  const std::string bad = write_temp("memtwin-bad-calib.yaml", "efficiency:\n  gemm: 0.8\n  gemms: 0.7\n");
  try {
    load_scenario_file(test::source_path("scenarios/quickstart.yaml"), {"cluster.calibration=" + bad});
    FAIL("accepted a bad calibration file");
  } catch (const ScenarioError& e) {
    CHECK(e.where().file == bad);
    CHECK(e.where().line == 3);
    CHECK_THAT(e.message(), Catch::Contains("did you mean 'efficiency.gemm'"));
  }
}

TEST_CASE("UTF-8 is checked as RFC 3629 defines it: no overlong forms, surrogates or code points past U+10FFFF", "[unit]") {
  constexpr auto npos = std::string_view::npos;
  CHECK(first_invalid_utf8("plain ASCII") == npos);
  CHECK(first_invalid_utf8("H\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80") == npos);  // é, €, an emoji
  CHECK(first_invalid_utf8("ab\xFF") == 2);                                         // never a lead byte
  CHECK(first_invalid_utf8("\xC0\xAF") == 0);                                       // overlong '/'
  CHECK(first_invalid_utf8("x\xE0\x80\xAF") == 1);                                  // overlong, 3 bytes
  CHECK(first_invalid_utf8("\xED\xA0\x80") == 0);                                   // a surrogate
  CHECK(first_invalid_utf8("\xF4\x90\x80\x80") == 0);                               // past U+10FFFF
  CHECK(first_invalid_utf8("ok\xE2\x82") == 2);                                     // cut short
  CHECK(first_invalid_utf8("\xE2\x28\xA1") == 0);                                   // bad continuation
}

TEST_CASE("a result with a NaN or infinite number is refused, naming the metric, never printed", "[unit]") {
  const LoadedScenario loaded = load_quickstart_scenario();
  RunResult r;
  r.backend = "analytic";
  r.metrics["time"]["step_s"] = 1.5;
  CHECK_NOTHROW(result_document(loaded, r));
  r.metrics["time"]["phases"] = nlohmann::ordered_json::array({1.0, std::numeric_limits<double>::quiet_NaN()});
  CHECK_THROWS_WITH(result_document(loaded, r), Catch::Contains("time.phases[1] is not finite"));
  r.metrics["time"]["phases"] = nlohmann::ordered_json::array({1.0});
  r.metrics["memory"]["peak_bytes"] = std::numeric_limits<double>::infinity();
  CHECK_THROWS_WITH(result_document(loaded, r), Catch::Contains("memory.peak_bytes is not finite"));
}

TEST_CASE("vLLM's engine-argument names are read as memtwin's keys, in files and overrides", "[unit]") {
  const std::string head = "name: v\ncluster: {nodes: 1, gpus_per_node: 8, gpu: h100-sxm}\nmodel: llama-3-8b\ninference:\n";
  const std::string workload =
      "  workload: {rate: 5/s, requests: 10, prompt_tokens: {dist: fixed, value: 256}, output_tokens: {dist: fixed, value: 16}}\n";
  const LoadedScenario l = load_scenario_text(
      head + "  serving: {tensor_parallel_size: 2, data_parallel_size: 2, pipeline_parallel_size: 1, enable_chunked_prefill: false,\n"
             "            enable_prefix_caching: true, enforce_eager: true, preemption_mode: swap, kv_cache_dtype: fp8_e5m2}\n" +
          workload,
      "<test>", "");
  const Inference& inf = *l.scenario.inference;
  CHECK(inf.serving.tensor_parallel == 2);
  CHECK(inf.serving.replicas == 2);
  CHECK_FALSE(inf.serving.chunked_prefill);
  CHECK(inf.serving.prefix_caching);
  CHECK_FALSE(inf.serving.cuda_graphs);  // enforce_eager: no CUDA graphs
  CHECK(inf.serving.preemption == Preemption::swap);
  CHECK(inf.kv_cache.dtype == KvDtype::fp8);
  // The resolved scenario speaks memtwin's names.
  CHECK(l.resolved["inference"]["serving"]["tensor_parallel"] == 2);
  CHECK_FALSE(l.resolved["inference"]["serving"].contains("tensor_parallel_size"));
  // An override by either name replaces what the file said; auto is the default dtype.
  const LoadedScenario o = load_scenario_text(head + "  serving: {tensor_parallel_size: 2, kv_cache_dtype: fp8}\n" + workload, "<test>", "",
                                              {"inference.serving.tensor_parallel=4", "inference.serving.kv_cache_dtype=auto"});
  CHECK(o.scenario.inference->serving.tensor_parallel == 4);
  CHECK(o.scenario.inference->kv_cache.dtype == KvDtype::bf16);
  // Both names at once, or a flag that is not one, are refused at the alias's line.
  CHECK_THROWS_WITH(load_scenario_text(head + "  serving: {tensor_parallel: 2, tensor_parallel_size: 2}\n" + workload, "<test>", ""),
                    Catch::Contains("<test>:5") && Catch::Contains("tensor_parallel_size") && Catch::Contains("given too"));
  CHECK_THROWS_WITH(load_scenario_text(head + "  serving: {enforce_eager: maybe}\n" + workload, "<test>", ""),
                    Catch::Contains("expected true or false"));
  // Every alias names a key of the schema and is listed in SCHEMA.md.
  for (const KeyAlias& a : key_aliases()) {
    CHECK(find_param(a.key) != nullptr);
    CHECK(find_param(a.alias) == nullptr);
    CHECK(schema_markdown().find("`" + a.alias + "`") != std::string::npos);
  }
}

TEST_CASE("fine_tuning: METHOD is fine_tuning: {method: METHOD}", "[unit]") {
  const std::string text = "name: f\ncluster: {gpu: h100-sxm}\nmodel: llama-3-8b\ntraining: {micro_batch: 1, fine_tuning: qlora}\n";
  const LoadedScenario short_form = load_scenario_text(text, "<test>", "");
  CHECK(short_form.scenario.training->fine_tuning.method == FineTuning::qlora);
  const LoadedScenario long_form = load_scenario_text(
      "name: f\ncluster: {gpu: h100-sxm}\nmodel: llama-3-8b\ntraining: {micro_batch: 1, fine_tuning: {method: qlora}}\n", "<test>", "");
  CHECK(short_form.resolved == long_form.resolved);
  CHECK_THROWS_WITH(load_scenario_text("name: f\ncluster: {gpu: h100-sxm}\nmodel: llama-3-8b\ntraining: {fine_tuning: sort_of}\n", "<test>", ""),
                    Catch::Contains("training.fine_tuning.method"));
}
