// The real model on the host (hw/host/real_model.h): its file's checks, the serving engine's logits
// with it against llama.cpp's on the same GGUF file (tests/data/real_model/llama_cpp_logits.json,
// written by `scripts/real-model.sh --reference`; `scripts/dev.sh test` installs and converts the
// model), and what each KV method costs in quality on it (hw/host/kv_quality_measure.h).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "hw/host/bpe_tokenizer.h"
#include "hw/host/kv_quality_measure.h"
#include "hw/host/real_model.h"
#include "models/kv/kv_method.h"
#include "models/scenario/scenario_error.h"
#include "models/scenario_loader.h"
#include "tests/test_support.h"

namespace {

using memtwin::hw::RealModel;

const std::filesystem::path kModelDir = std::filesystem::path(MEMTWIN_BUILD_DIR) / "real-model" / "smollm2-135m";

nlohmann::json reference() {
  std::ifstream in(std::filesystem::path(MEMTWIN_SOURCE_DIR) / "tests/data/real_model/llama_cpp_logits.json");
  return nlohmann::json::parse(in);
}

// The serving scenario the real model runs in, with settings (as --set writes them).
memtwin::Scenario engine(const std::vector<std::string>& settings = {}) {
  return memtwin::load_scenario_file(memtwin::test::source_path("scenarios/quality/smollm2-135m.yaml"), settings).scenario;
}

double logsumexp(const float* row, int n) {
  const float peak = *std::max_element(row, row + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(row[i]) - peak);
  return peak + std::log(sum);
}

}  // namespace

TEST_CASE("[validation] SmolLM2-135M on the host with an fp16 KV cache gives llama.cpp's next-token logits",
          "[validation][real-model]") {
  if (!std::filesystem::exists(kModelDir / "model.json")) {
    FAIL("no converted model at " << kModelDir << ": run scripts/real-model.sh (scripts/dev.sh test does)");
  }
  const RealModel model = RealModel::load(kModelDir);
  const auto& c = model.config();
  // The architecture as the GGUF metadata gives it (the model card's figures).
  CHECK(c.layers == 30);
  CHECK(c.hidden == 576);
  CHECK(c.heads == 9);
  CHECK(c.kv_heads == 3);
  CHECK(c.head_dim == 64);
  CHECK(c.vocab == 49152);
  CHECK(c.tied_embeddings);
  const nlohmann::json ref = reference();
  REQUIRE(c.source_sha256 == ref.at("model_sha256").get<std::string>());

  // Tolerance: llama.cpp's CPU matmuls quantise the activations to 8 bits (blocks of 32) before
  // multiplying them by the Q4_1/Q8_0 weights; memtwin multiplies float32 activations by the same
  // weights dequantised to float32. Both keep K and V in fp16. At the first position, where
  // attention has nothing to differ on, the logits already differ by up to 0.5 (of a spread of
  // about 20); measured over the 49 positions: largest 1.09, mean 0.19, log-probabilities mean 0.12,
  // largest 0.66. A wrong layout (an un-permuted rotary pair, a missing norm weight) moves them by
  // several units. The bounds sit just above the measured figures.
  constexpr double kLogitWorst = 1.25, kLogitMean = 0.25, kLogProbWorst = 0.8, kLogProbMean = 0.15;
  constexpr double kDecisiveMargin = 0.25;  // top-1 must agree where llama.cpp's top two differ by more
  constexpr double kPathsWorst = 0.05;
  // The serving engine with its fp16 cache, each prompt fed token by token after its first (every
  // position a decode step: its logits are the ones after it), and once more with the prompt
  // prefilled whole (the prompt's causal attention, then its last position's logits).
  std::vector<memtwin::hw::QualityText> decoded, prefilled;
  for (const auto& prompt : ref.at("prompts")) {
    auto tokens = prompt.at("tokens").get<std::vector<int>>();
    const int n = static_cast<int>(tokens.size());
    tokens.push_back(0);  // scored after the last position, never fed
    decoded.push_back({tokens, 1, false});
    prefilled.push_back({tokens, n, false});
  }
  const auto by_decode = memtwin::hw::run_real_model(engine(), model, decoded);
  const auto by_prefill = memtwin::hw::run_real_model(engine(), model, prefilled);
  double worst = 0, worst_log_prob = 0, sum = 0, sum_log_prob = 0, worst_paths = 0;
  int positions = 0, compared = 0;
  for (std::size_t p = 0; p < decoded.size(); ++p) {
    const auto& prompt = ref.at("prompts")[p];
    const auto tokens = prompt.at("tokens").get<std::vector<int>>();
    const std::vector<float>& logits = by_decode.logits[p];
    REQUIRE(logits.size() == tokens.size() * static_cast<std::size_t>(c.vocab));
    // The last position by both paths: decode attention over the fp16 cache, prefill attention
    // over the fresh fp32 K and V; they differ by the cache's rounding only.
    const float* last = logits.data() + (tokens.size() - 1) * c.vocab;
    for (int v = 0; v < c.vocab; ++v) worst_paths = std::max(worst_paths, static_cast<double>(std::abs(last[v] - by_prefill.logits[p][v])));
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      const auto& expected = prompt.at("positions")[t];
      const float* row = logits.data() + t * c.vocab;
      const auto ids = expected.at("top_ids").get<std::vector<int>>();
      const auto values = expected.at("top_logits").get<std::vector<double>>();
      // The logits of llama.cpp's 16 most likely tokens, and their log-probabilities (shift-free).
      const double ours_lse = logsumexp(row, c.vocab), theirs_lse = expected.at("logsumexp").get<double>();
      for (std::size_t k = 0; k < ids.size(); ++k) {
        const double logit = std::abs(row[ids[k]] - values[k]);
        const double log_prob = std::abs((row[ids[k]] - ours_lse) - (values[k] - theirs_lse));
        worst = std::max(worst, logit);
        worst_log_prob = std::max(worst_log_prob, log_prob);
        sum += logit;
        sum_log_prob += log_prob;
        ++compared;
      }
      if (values[0] - values[1] > kDecisiveMargin) {
        INFO("prompt '" << prompt.at("text").get<std::string>() << "', position " << t);
        CHECK(std::max_element(row, row + c.vocab) - row == ids[0]);
      }
      ++positions;
    }
  }
  CHECK(positions == 49);
  INFO("logits: largest difference " << worst << ", mean " << sum / compared << "; log-probabilities: largest "
                                     << worst_log_prob << ", mean " << sum_log_prob / compared << "; decode and prefill paths: largest "
                                     << worst_paths);
  CHECK(worst_paths < kPathsWorst);
  CHECK(worst < kLogitWorst);
  CHECK(sum / compared < kLogitMean);
  CHECK(worst_log_prob < kLogProbWorst);
  CHECK(sum_log_prob / compared < kLogProbMean);
}

TEST_CASE("[validation] on SmolLM2-135M each KV method costs what it should: fewer bits lose more, KIVI's keys beat "
          "per-token int4, eviction loses a fact the full cache keeps",
          "[validation][real-model]") {
  if (!std::filesystem::exists(kModelDir / "tokenizer.json")) {
    FAIL("no converted model at " << kModelDir << ": run scripts/real-model.sh (scripts/dev.sh test does)");
  }
  const RealModel model = RealModel::load(kModelDir);
  const auto tokenizer = memtwin::hw::BpeTokenizer::load(kModelDir / "tokenizer.json");
  std::ifstream in(std::filesystem::path(MEMTWIN_SOURCE_DIR) / "data/corpus/coriolanus-act1.txt", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  const std::vector<int> ids = tokenizer.encode(text);
  // Two corpus texts (128-token prompts, 32 scored tokens each) and two retrieval probes of 128
  // tokens; a few seconds per method here.
  std::vector<memtwin::hw::QualityText> texts;
  for (int w = 0; w < 2; ++w) texts.push_back({std::vector<int>(ids.begin() + w * 160, ids.begin() + (w + 1) * 160), 128, false});
  const std::vector<int> filler(ids.begin() + 320, ids.end());
  for (int p = 0; p < 2; ++p) texts.push_back(memtwin::hw::retrieval_probe(tokenizer, filler, 128, p));
  memtwin::hw::QualityText generated{std::vector<int>(ids.begin(), ids.begin() + 128), 128, false, true};
  generated.tokens.resize(128 + 16);  // the first prompt continued greedily for 16 tokens
  texts.push_back(generated);
  auto method = [](const std::string& name, std::vector<std::string> settings) {
    settings.insert(settings.begin(), "inference.kv_cache.compression.method=" + name);
    return engine(settings);
  };
  const std::string groups = "inference.kv_cache.compression.group_size=32";  // 32 channels per token; KIVI: 32 tokens per key group
  const auto measured = memtwin::hw::measure_kv_quality(
      model,
      {engine(), method("int8", {groups}), method("int4", {groups}), method("int2", {groups}),
       method("kivi", {"inference.kv_cache.compression.bits=4", groups, "inference.kv_cache.compression.residual=32"}),
       method("streaming", {"inference.kv_cache.compression.sinks=4", "inference.kv_cache.compression.window=22"})},
      engine(), texts);
  const auto &same = measured[0], &int8 = measured[1], &int4 = measured[2], &int2 = measured[3], &kivi4 = measured[4],
             &streaming = measured[5];
  INFO("fp16 perplexity " << same.perplexity << "; int8 " << int8.perplexity << " (KL " << int8.kl << "), int4 " << int4.perplexity
                          << " (KL " << int4.kl << "), int2 " << int2.perplexity << " (KL " << int2.kl << "), KIVI-4 "
                          << kivi4.perplexity << " (KL " << kivi4.kl << "); retrieval: fp16 " << same.retrieval << ", StreamingLLM "
                          << streaming.retrieval);
  CHECK(same.positions == 64);
  // The reference against itself: the same bits, so exactly nothing lost.
  CHECK(same.perplexity_delta == 0.0);
  CHECK(same.kl == 0.0);
  CHECK(same.token_agreement == 1.0);
  CHECK(same.generation_agreement == 1.0);
  CHECK(int2.generation_agreement < 1.0);  // two bits change what the model writes
  for (const auto& m : measured) {
    CHECK(std::isfinite(m.perplexity));
    CHECK(m.perplexity > 1);
    CHECK(m.reference_perplexity == same.perplexity);
    CHECK(m.tpot_s > 0);  // measured: only its sign is certain
  }
  // Fewer bits, more lost: in perplexity, in divergence and in agreement.
  CHECK(std::abs(int8.perplexity_delta) < int4.perplexity_delta);
  CHECK(int4.perplexity_delta < int2.perplexity_delta);
  CHECK(int8.kl < int4.kl);
  CHECK(int4.kl < int2.kl);
  CHECK(int8.token_agreement >= int4.token_agreement);
  CHECK(int4.token_agreement > int2.token_agreement);
  // KIVI-4 quantises keys per channel (their outlier channels get scales of their own) and keeps
  // the newest tokens in fp16: at the same 4 bits it loses less than per-token int4.
  CHECK(kivi4.perplexity_delta < int4.perplexity_delta);
  CHECK(kivi4.kl < int4.kl);
  // The full cache finds both pass codes; StreamingLLM keeping 20% of the prompt (4 sinks and the
  // last 22 tokens) has dropped the sentence that held them.
  CHECK(same.retrieval == 1.0);
  CHECK(streaming.retrieval < same.retrieval);
}

TEST_CASE("[validation] the real model's tokenizer splits text as llama.cpp does", "[validation][real-model]") {
  if (!std::filesystem::exists(kModelDir / "tokenizer.json")) {
    FAIL("no converted tokenizer at " << kModelDir << ": run scripts/real-model.sh (scripts/dev.sh test does)");
  }
  const auto tokenizer = memtwin::hw::BpeTokenizer::load(kModelDir / "tokenizer.json");
  CHECK(tokenizer.vocabulary_size() == 49152);
  const nlohmann::json ref = reference();
  // The prompts of the logits check, then non-ASCII texts and the corpus.
  for (const auto& prompt : ref.at("prompts")) {
    CHECK(tokenizer.encode(prompt.at("text").get<std::string>()) == prompt.at("tokens").get<std::vector<int>>());
  }
  for (const auto& item : ref.at("tokenized")) {
    std::string text;
    if (item.contains("file")) {
      std::ifstream in(std::filesystem::path(MEMTWIN_SOURCE_DIR) / item.at("file").get<std::string>(), std::ios::binary);
      text.assign(std::istreambuf_iterator<char>(in), {});
      REQUIRE(!text.empty());
    } else {
      text = item.at("text").get<std::string>();
    }
    const auto expected = item.at("tokens").get<std::vector<int>>();
    const auto ours = tokenizer.encode(text);
    const auto differs = std::mismatch(ours.begin(), ours.end(), expected.begin(), expected.end());
    INFO(text.substr(0, 60) << "...: " << ours.size() << " tokens, llama.cpp " << expected.size() << "; first difference at token "
                            << (differs.first - ours.begin()));
    CHECK(ours == expected);
  }
}

TEST_CASE("[validation] memtwin quality measures every method the engine runs against fp16, and refuses bad options",
          "[validation][real-model]") {
  if (!std::filesystem::exists(kModelDir / "tokenizer.json")) {
    FAIL("no converted model at " << kModelDir << ": run scripts/real-model.sh (scripts/dev.sh test does)");
  }
  using memtwin::test::run_memtwin;
  // The default set, small: one 64-token prompt with 4 scored tokens, 6 generated, one probe.
  const auto all = run_memtwin({"quality", "--prompt", "64", "--continuation", "4", "--windows", "1", "--probes", "1", "--generate", "6", "--budgets",
                                "0.5", "--json"});
  REQUIRE(all.exit_code == 0);
  const auto doc = nlohmann::json::parse(all.out);
  CHECK(doc.at("schema") == "memtwin.quality/2");
  CHECK(doc.at("texts").at("positions") == 4);
  const auto& methods = doc.at("quality").at("methods");
  std::vector<std::string> names;
  for (const auto& m : methods) {
    names.push_back(m.at("method").get<std::string>());
    CHECK(std::isfinite(m.at("perplexity").get<double>()));
    CHECK(m.at("tpot_s").get<double>() > 0);  // measured: only its sign is certain
    const double retrieval = m.at("retrieval").get<double>();
    CHECK((retrieval == 0.0 || retrieval == 1.0));  // one probe: answered or not
    const double generated = m.at("generation_agreement").get<double>();
    CHECK((generated >= 0 && generated <= 1));
  }
  // Every method whose descriptor says the engine runs it, the evicting ones at the budget asked.
  for (const auto* method : memtwin::kv_methods()) {
    const auto count = std::count(names.begin(), names.end(), std::string(method->name()));
    if (method->runs_on_devices()) CHECK(count >= 1);
    else CHECK(count == 0);
    if (method->selection != memtwin::KvSelection::all) {
      for (const auto& m : methods)
        if (m.at("method") == method->name()) CHECK(m.at("budget").get<double>() == 0.5);
    }
  }
  CHECK(methods[0].at("variant") == "fp16");
  CHECK(methods[0].at("perplexity_delta").get<double>() == 0.0);
  CHECK(methods[0].at("kv_bytes_per_token").get<double>() == 2.0 * 64 * 2 * 3 * 30);  // fp16 K and V, 3 KV heads, 30 layers
  // A scenario's own cache: KIVI with the scenario's parameters.
  const auto kivi = run_memtwin({"quality", memtwin::test::source_path("scenarios/host/serve-kivi-kv.yaml"), "--prompt", "64",
                                 "--continuation", "4", "--windows", "1", "--probes", "0", "--generate", "0", "--json"});
  REQUIRE(kivi.exit_code == 0);
  const auto one = nlohmann::json::parse(kivi.out).at("quality").at("methods");
  REQUIRE(one.size() == 1);
  CHECK(one[0].at("method") == "kivi");
  CHECK(one[0].at("retrieval").get<double>() == -1.0);  // no probes
  CHECK(one[0].at("generation_agreement").get<double>() == -1.0);  // nothing generated
  const auto short_corpus = run_memtwin({"quality", "--windows", "40"});
  CHECK(short_corpus.exit_code == 2);
  CHECK_THAT(short_corpus.err, Catch::Contains("the corpus has 4714 tokens"));
  const auto bad_budget = run_memtwin({"quality", "--budgets", "0.2,1.5"});
  CHECK(bad_budget.exit_code == 2);
  CHECK_THAT(bad_budget.err, Catch::Contains("--budgets takes shares of the prompt in (0, 1)"));
}

TEST_CASE("[unit] a real model's files are refused with the file and key when incomplete or unreadable", "[unit][real-model]") {
  const auto dir = std::filesystem::temp_directory_path() / "memtwin-real-model-test";
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& json) { std::ofstream(dir / "model.json") << json; };
  auto error_of = [&]() -> std::string {
    try {
      (void)RealModel::load(dir);
    } catch (const memtwin::ScenarioError& e) {
      return e.where().file + ": " + e.key() + ": " + e.message();
    }
    return "";
  };
  std::filesystem::remove(dir / "model.json");
  CHECK_THAT(error_of(), Catch::Contains("model.json: model: cannot be read") && Catch::Contains("scripts/real-model.sh"));
  write("[1, 2]");
  CHECK_THAT(error_of(), Catch::Contains("must be a JSON object"));
  const std::string head = R"({"architecture": "llama", "name": "t", "layers": 1, "hidden": 8, "intermediate": 16, "heads": 2,
                              "kv_heads": 1, "head_dim": 4, "vocab": 10, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
                              "tied_embeddings": true)";
  write(head + "}");
  CHECK_THAT(error_of(), Catch::Contains("tensors: missing"));
  write(R"({"architecture": "gpt2"})");
  CHECK_THAT(error_of(), Catch::Contains("architecture: must be 'llama'"));
  write(head + R"(, "tensors": [{"name": "token_embd.weight", "shape": [10, 8], "offset": 0}]})");
  std::ofstream(dir / "weights.f32", std::ios::binary) << std::string(12, '\0');
  CHECK_THAT(error_of(), Catch::Contains("weights.f32: weights: holds 12 bytes; model.json's tensors need 320"));
  std::ofstream(dir / "weights.f32", std::ios::binary) << std::string(320, '\0');
  CHECK_THAT(error_of(), Catch::Contains("tensors: has no 'output_norm.weight'"));
  write(head + R"(, "tensors": [{"name": "token_embd.weight", "shape": [10, 4], "offset": 0},
                                {"name": "output_norm.weight", "shape": [1, 8], "offset": 72}]})");
  CHECK_THAT(error_of(), Catch::Contains("'token_embd.weight' is 10 x 4, the architecture needs 10 x 8"));
  write(head + R"(, "tensors": [{"name": "token_embd.weight", "shape": [10, 8], "offset": 18446744073709551600}]})");
  CHECK_THAT(error_of(), Catch::Contains("tensors[0].offset: is past any file's end"));
  // A number past a double's range is nlohmann's out_of_range, not its parse_error: refused all the same.
  write(R"({"architecture": "llama", "rope_theta": 1e400})");
  CHECK_THAT(error_of(), Catch::Contains("model.json: model: is not JSON memtwin can read") && Catch::Contains("number overflow"));
  std::ofstream(dir / "tokenizer.json") << R"({"model": "gpt2", "merges": [1e400]})";
  try {
    (void)memtwin::hw::BpeTokenizer::load(dir / "tokenizer.json");
    FAIL("a tokenizer.json with an unreadable number was accepted");
  } catch (const memtwin::ScenarioError& e) {
    CHECK_THAT(e.key() + ": " + e.message(), Catch::Contains("tokenizer: is not JSON memtwin can read"));
  }
  std::filesystem::remove_all(dir);
}
