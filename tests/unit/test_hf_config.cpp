// HuggingFace config.json files of the architectures memtwin reads (tests/data/hf/, the models'
// published configs): the parameter count each gives against the count published for the model
// (its safetensors' total), and the KV bytes per token of a 16-bit cache.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "models/model_facts.h"
#include "models/scenario_loader.h"
#include "tests/test_support.h"

using namespace memtwin;

namespace {

ModelSpec from_config(const std::string& file) {
  const std::string scenario = "name: hf\ncluster: {gpu: h100-sxm}\nmodel: {hf_config: " +
                               test::source_path("tests/data/hf/" + file) + "}\ntraining: {micro_batch: 1, seq_len: 1024}\n";
  return load_scenario_text(scenario, "<test>", "").scenario.model;
}

struct Published {
  const char* file;
  double parameters;        ///< the model's published parameter count (its weights' total)
  double active;            ///< parameters a token passes through (MoE: shared + its top-k experts)
  double kv_bytes_per_token;  ///< 2 (K, V) x layers x KV heads x head_dim x 2 bytes
};

// Parameters from each model's safetensors index (total_size / 2 for 16-bit weights), active counts
// from the model cards (Mixtral 12.9B, Qwen3-30B-A3B 3.3B).
constexpr Published kPublished[] = {
    {"llama-3-8b.json", 8'030'261'248, 8'030'261'248, 32 * 8 * 128 * 4},
    {"mistral-7b-v0.1.json", 7'241'732'096, 7'241'732'096, 32 * 8 * 128 * 4},
    {"mixtral-8x7b-v0.1.json", 46'702'792'704, 12.9e9, 32 * 8 * 128 * 4},
    {"qwen2-7b.json", 7'615'616'512, 7'615'616'512, 28 * 4 * 128 * 4},
    {"qwen3-8b.json", 8'190'735'360, 8'190'735'360, 36 * 8 * 128 * 4},
    {"qwen3-30b-a3b.json", 30'532'122'624, 3.3e9, 48 * 4 * 128 * 4},
    {"gemma-7b.json", 8'537'680'896, 8'537'680'896, 28 * 16 * 256 * 4},
    {"gemma-2-9b.json", 9'241'705'984, 9'241'705'984, 42 * 8 * 256 * 4},
    {"phi-3-mini-4k-instruct.json", 3'821'079'552, 3'821'079'552, 32 * 32 * 96 * 4},
    {"falcon-7b.json", 6'921'720'704, 6'921'720'704, 32 * 1 * 64 * 4},
    {"pythia-1.4b.json", 1'414'647'808, 1'414'647'808, 24 * 16 * 128 * 4},
    {"gpt2.json", 124'439'808, 124'439'808, 12 * 12 * 64 * 4},
};

}  // namespace

TEST_CASE("HuggingFace configs of twelve architectures (llama to gpt_neox) give their published parameter counts", "[validation]") {
  for (const Published& p : kPublished) {
    INFO(p.file);
    const ModelSpec m = from_config(p.file);
    const ParameterCount count = count_parameters(m);
    // Within 0.01%: memtwin counts every weight matrix and embedding, and one or two norms a layer;
    // Gemma-2's extra post-norms, Qwen3's per-head query/key norms and Falcon's shared layer norm
    // are vectors of a few thousand elements per layer.
    CHECK(count.total == Approx(p.parameters).epsilon(1e-4));
    // Active parameters as the model cards round them (to 0.1B).
    CHECK(count.active == Approx(p.active).epsilon(0.02));
    CHECK(2.0 * m.layers * m.kv_heads * m.head_dim * 2 == p.kv_bytes_per_token);
  }
}

TEST_CASE("a config memtwin cannot model is refused, naming what it reads", "[unit]") {
  auto refused = [](const std::string& json) {
    const std::string path = (std::filesystem::temp_directory_path() / "memtwin-hf-refused.json").string();
    std::ofstream(path) << json;
    const std::string scenario = "name: hf\ncluster: {gpu: h100-sxm}\nmodel: {hf_config: " + path + "}\ntraining: {micro_batch: 1}\n";
    try {
      load_scenario_text(scenario, "<test>", "");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string dims = R"("hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8, "vocab_size": 1000, "intermediate_size": 2048)";
  CHECK_THAT(refused("{\"model_type\": \"rwkv\", " + dims + "}"),
             Catch::Contains("'rwkv' is not one memtwin reads") && Catch::Contains("qwen3_moe") && Catch::Contains("falcon"));
  CHECK_THAT(refused("{" + dims + "}"), Catch::Contains("model_type is missing"));
  CHECK_THAT(refused("{\"model_type\": \"deepseek_v3\", \"kv_lora_rank\": 512, " + dims + "}"),
             Catch::Contains("multi-head latent attention"));
  CHECK_THAT(refused("{\"model_type\": \"qwen3_moe\", \"moe_intermediate_size\": 256, \"num_experts\": 8, \"mlp_only_layers\": [0], " + dims + "}"),
             Catch::Contains("dense layers between the MoE layers"));
  // Gemma ties its head to the embedding unless the config says otherwise; Llama does not.
  CHECK(from_config("gemma-7b.json").tied_embeddings);
  CHECK_FALSE(from_config("llama-3-8b.json").tied_embeddings);
}
