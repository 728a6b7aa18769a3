#include <catch2/catch.hpp>

#include "models/model_facts.h"
#include "models/scenario_loader.h"

using namespace memtwin;

namespace {

// Architecture fields as published in each model's config.json (or paper), transcribed here
// independently of scenarios/presets/models.yaml so that a typo in either is caught.
struct PublishedModel {
  const char* name;
  int layers, hidden, heads, kv_heads, intermediate, vocab, max_positions;
  double parameters;  // published total (exact from the released weights where they exist)
  double tolerance;   // relative; 0 = exact
};

const PublishedModel kPublished[] = {
    {"llama-2-7b", 32, 4096, 32, 32, 11008, 32000, 4096, 6'738'415'616, 0},
    {"llama-2-13b", 40, 5120, 40, 40, 13824, 32000, 4096, 13'015'864'320, 0},
    {"llama-2-70b", 80, 8192, 64, 8, 28672, 32000, 4096, 68'976'648'192, 0},
    {"llama-3-8b", 32, 4096, 32, 8, 14336, 128256, 8192, 8'030'261'248, 0},
    {"llama-3-70b", 80, 8192, 64, 8, 28672, 128256, 8192, 70'553'706'496, 0},
    {"llama-3.1-8b", 32, 4096, 32, 8, 14336, 128256, 131072, 8'030'261'248, 0},
    {"llama-3.1-70b", 80, 8192, 64, 8, 28672, 128256, 131072, 70'553'706'496, 0},
    {"llama-3.1-405b", 126, 16384, 128, 8, 53248, 128256, 131072, 405'853'388'800, 0},
    {"mistral-7b", 32, 4096, 32, 8, 14336, 32000, 32768, 7'241'732'096, 0},
    {"mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 32768, 46'702'792'704, 0},
    {"qwen2-7b", 28, 3584, 28, 4, 18944, 152064, 131072, 7'615'616'512, 0},
    // OPT and GPT-3: the papers give nominal sizes only.
    {"opt-13b", 40, 5120, 40, 40, 20480, 50272, 2048, 13e9, 0.015},
    {"opt-30b", 48, 7168, 56, 56, 28672, 50272, 2048, 30e9, 0.015},
    {"opt-66b", 64, 9216, 72, 72, 36864, 50272, 2048, 66e9, 0.015},
    {"opt-175b", 96, 12288, 96, 96, 49152, 50272, 2048, 175e9, 0.015},
    {"gpt3-175b", 96, 12288, 96, 96, 49152, 50257, 2048, 175e9, 0.015},
};

}  // namespace

TEST_CASE("model catalog entries match their published configs", "[unit]") {
  REQUIRE(catalog_model_names().size() == std::size(kPublished));
  for (const auto& p : kPublished) {
    INFO(p.name);
    ModelSpec m = catalog_model(p.name);
    CHECK(m.layers == p.layers);
    CHECK(m.hidden == p.hidden);
    CHECK(m.heads == p.heads);
    CHECK(m.kv_heads == p.kv_heads);
    CHECK(m.intermediate == p.intermediate);
    CHECK(m.vocab == p.vocab);
    CHECK(m.max_position_embeddings == p.max_positions);
    CHECK_FALSE(m.source.empty());
    const double total = count_parameters(m).total;
    if (p.tolerance == 0) {
      CHECK(total == p.parameters);
    } else {
      CHECK(total == Approx(p.parameters).epsilon(p.tolerance));
    }
  }
}

TEST_CASE("MoE active parameters count the routed experts only", "[unit]") {
  // Mixtral-8x7B: 12.9B active of 46.7B (Mistral AI's announcement).
  CHECK(count_parameters(catalog_model("mixtral-8x7b")).active == Approx(12.9e9).epsilon(0.01));
}

TEST_CASE("KV bytes per token follow 2 x layers x kv_heads x head_dim x bytes", "[unit]") {
  // vLLM paper: OPT-13B needs 2 x 5120 x 40 x 2 bytes = 800 KB per token.
  CHECK(kv_bytes_per_token(catalog_model("opt-13b"), 2.0).count() == 2 * 5120 * 40 * 2);
  // GQA: Llama-3-8B keeps 8 of 32 heads: 128 KiB per token in bf16.
  CHECK(kv_bytes_per_token(catalog_model("llama-3-8b"), 2.0).count() == 128 * 1024);
  // Tensor parallel splits the KV heads; beyond kv_heads they are replicated.
  ModelSpec llama70 = catalog_model("llama-2-70b");
  CHECK(kv_bytes_per_token(llama70, 2.0, 4).count() == kv_bytes_per_token(llama70, 2.0).count() / 4);
  CHECK(kv_bytes_per_token(llama70, 2.0, 16).count() == kv_bytes_per_token(llama70, 2.0, 8).count());
  // Pipeline parallel splits the layers.
  CHECK(kv_bytes_per_token(llama70, 2.0, 1, 4).count() == kv_bytes_per_token(llama70, 2.0).count() / 4);
}

TEST_CASE("forward FLOPs per token reproduce Korthikanti et al. eq. 7 for a GPT model", "[unit]") {
  // eq. 7 per token and pass: 72 B L s h^2 (1 + s/6h + V/12hL) / (3 B s)
  ModelSpec gpt = catalog_model("gpt3-175b");
  const double L = gpt.layers, h = gpt.hidden, V = gpt.vocab, s = 2048;
  const double eq7 = 72 * L * s * h * h * (1 + s / (6 * h) + V / (12 * h * L)) / (3 * s);
  CHECK(forward_flops_per_token(gpt, 2048).value() == Approx(eq7).epsilon(1e-12));
}

struct PublishedGpu {
  const char* name;
  double memory_gib, hbm_tb_s, bf16_tflops;
  bool nvlink;
};

TEST_CASE("GPU catalog entries match the datasheets", "[unit]") {
  const PublishedGpu gpus[] = {
      {"a100-40gb", 40, 1.555, 312, true}, {"a100-80gb", 80, 2.039, 312, true},
      {"h100-sxm", 79.65, 3.35, 989, true}, {"h200", 139.8, 4.8, 989, true},  // H200: measured here
      {"l40s", 45.0, 0.864, 362.05, false}, {"rtx-4090", 24.0, 1.008, 165.2, false},
  };
  // The host device has no datasheet: its nominal figures are for calibration to replace.
  REQUIRE(catalog_gpu_names().size() == std::size(gpus) + 1);
  CHECK(catalog_gpu("host-cpu").flops.count(Precision::bf16) == 0);
  for (const auto& p : gpus) {
    INFO(p.name);
    GpuSpec g = catalog_gpu(p.name);
    CHECK(g.memory.as_double() / (1ULL << 30) == Approx(p.memory_gib).epsilon(0.005));
    CHECK(g.hbm_bandwidth.value() == Approx(p.hbm_tb_s * 1e12));
    CHECK(g.flops.at(Precision::bf16).value() == Approx(p.bf16_tflops * 1e12));
    CHECK(g.nvlink_bandwidth.has_value() == p.nvlink);
    CHECK_FALSE(g.source.empty());
  }
}

TEST_CASE("an efficiency preset sets a stack's efficiencies, which the scenario's own keys replace", "[unit]") {
  const std::string base =
      "name: stack\ncluster: {nodes: 1, gpus_per_node: 8, gpu: h100-sxm, efficiency: pytorch-2023-hopper}\n"
      "model: llama-2-7b\ntraining: {micro_batch: 1, seq_len: 2048, global_batch: 8}\n";
  const Scenario preset = load_scenario_text(base, "stack.yaml", ".").scenario;
  CHECK(preset.cluster.efficiency.gemm == 0.556);  // scenarios/presets/efficiency.yaml
  CHECK(preset.cluster.efficiency.attention == 0.258);
  CHECK(preset.cluster.efficiency.memory == 0.89);  // what the entry does not give keeps its default
  // A key of the scenario's, in the file or as an override after the shorthand, wins.
  const Scenario own = load_scenario_text(base, "stack.yaml", ".", {"cluster.efficiency.gemm=0.7"}).scenario;
  CHECK(own.cluster.efficiency.gemm == 0.7);
  CHECK(own.cluster.efficiency.attention == 0.258);
  const Scenario set = load_scenario_text("name: stack\ncluster: {nodes: 1, gpus_per_node: 8, gpu: h100-sxm}\nmodel: llama-2-7b\n"
                                          "training: {micro_batch: 1, seq_len: 2048, global_batch: 8}\n",
                                          "stack.yaml", ".", {"cluster.efficiency=pytorch-2023-hopper", "cluster.efficiency.gemm=0.7"})
                           .scenario;
  CHECK(set.cluster.efficiency.gemm == 0.7);
  CHECK(set.cluster.efficiency.attention == 0.258);
}
