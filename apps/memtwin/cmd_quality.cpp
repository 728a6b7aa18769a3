// memtwin quality: what each KV method costs in quality, measured by the serving engine running a
// real model's weights on the host (hw/host/real_model.h, hw/host/kv_quality_measure.h).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/memtwin/commands.h"
#include "apps/memtwin/options.h"
#include "hw/host/bpe_tokenizer.h"
#include "hw/host/kv_quality_measure.h"
#include "hw/host/real_model.h"
#include "models/backend.h"
#include "models/kv/kv_method.h"
#include "models/memory/serving_memory.h"
#include "models/scenario_loader.h"

namespace po = boost::program_options;

namespace memtwin::cli {

namespace {

struct Candidate {
  std::string method;  ///< inference.kv_cache.compression.method
  std::string variant;  ///< its setting, e.g. "20% of the prompt"
  double budget = 1;    ///< the share of the prompt's tokens it keeps (1: every token)
  Scenario scenario;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot read the corpus '" + path + "'");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  if (text.empty()) throw UsageError("the corpus '" + path + "' is empty");
  return text;
}

std::vector<double> parse_budgets(const std::string& list) {
  std::vector<double> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    std::size_t used = 0;
    double b = 0;
    try {
      b = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || !(b > 0 && b < 1)) throw UsageError("--budgets takes shares of the prompt in (0, 1), e.g. 0.2,0.5; got '" + item + "'");
    out.push_back(b);
  }
  if (out.empty()) throw UsageError("--budgets is empty");
  return out;
}

}  // namespace

int cmd_quality(const Args& args) {
  po::options_description options("options");
  options.add_options()
      ("scenario", po::value<std::string>(), "a serving scenario: measure its KV cache method (default: every method the engine runs)")
      ("set", po::value<std::vector<std::string>>()->composing(), "override a scenario key (repeatable)")
      ("model", po::value<std::string>()->default_value(MEMTWIN_REAL_MODEL_DIR), "the converted model (scripts/real-model.sh)")
      ("engine", po::value<std::string>()->default_value(MEMTWIN_QUALITY_SCENARIO), "the serving scenario the real model runs in")
      ("corpus", po::value<std::string>()->default_value(MEMTWIN_CORPUS_FILE), "plain UTF-8 text to score")
      ("prompt", po::value<int>()->default_value(256), "prompt tokens of each text")
      ("continuation", po::value<int>()->default_value(64), "tokens scored after each corpus prompt")
      ("windows", po::value<int>()->default_value(2), "corpus texts, taken from the corpus's start")
      ("probes", po::value<int>()->default_value(4), "retrieval probes (a pass code at the start, asked for at the end)")
      ("generate", po::value<int>()->default_value(32), "tokens generated greedily after each corpus prompt (0: none)")
      ("budgets", po::value<std::string>()->default_value("0.2,0.5"), "shares of the prompt the evicting methods keep")
      ("json", po::bool_switch(), "print JSON");
  po::positional_options_description positional;
  positional.add("scenario", 1);
  auto vm = parse_args(args, options, positional,
                       "usage: memtwin quality [SCENARIO] [--prompt N] [--continuation N] [--windows K] [--probes K]\n"
                       "                       [--generate N] [--budgets 0.2,0.5] [--corpus FILE] [--json]\n\n"
                       "Serves a real model (SmolLM2-135M on the host, installed by scripts/real-model.sh) with its KV\n"
                       "cache under each method: texts from a corpus and retrieval probes are prefilled, their\n"
                       "continuations fed back token by token, and greedy continuations of the same prompts generated.\n"
                       "Reports, against the fp16 cache: perplexity and its delta, mean KL divergence of the next-token\n"
                       "distributions, agreement of the most likely next token, agreement of the generated tokens,\n"
                       "probes answered, KV bytes per token and the measured time per output token\n"
                       "(docs/real-model.md).");
  if (!vm) return kOk;
  const int prompt = (*vm)["prompt"].as<int>(), continuation = (*vm)["continuation"].as<int>();
  const int windows = (*vm)["windows"].as<int>(), probes = (*vm)["probes"].as<int>(), generate = (*vm)["generate"].as<int>();
  if (prompt < 64 || prompt > 4096) throw UsageError("--prompt must be between 64 and 4096 tokens");
  if (continuation < 2 || continuation > 4096) throw UsageError("--continuation must be between 2 and 4096 tokens");
  if (windows < 1 || windows > 64) throw UsageError("--windows must be between 1 and 64");
  if (probes < 0 || probes > 64) throw UsageError("--probes must be between 0 and 64");
  if (generate < 0 || generate > 4096) throw UsageError("--generate must be between 0 and 4096 tokens");
  const std::vector<double> budgets = parse_budgets((*vm)["budgets"].as<std::string>());

  const auto started = std::chrono::steady_clock::now();
  const std::string model_dir = (*vm)["model"].as<std::string>();
  const hw::RealModel model = hw::RealModel::load(model_dir);
  const hw::BpeTokenizer tokenizer = hw::BpeTokenizer::load(std::filesystem::path(model_dir) / "tokenizer.json");

  // The texts: corpus windows from the start, then probes whose filler is the corpus after them.
  const std::string corpus = (*vm)["corpus"].as<std::string>();
  const std::vector<int> ids = tokenizer.encode(read_text(corpus));
  const long window = prompt + continuation;
  const long needed = window * windows + static_cast<long>(prompt) * (probes > 0 ? 1 : 0);
  if (static_cast<long>(ids.size()) < needed) {
    throw UsageError("the corpus has " + std::to_string(ids.size()) + " tokens; " + std::to_string(windows) + " windows of " +
                     std::to_string(window) + " and the probes' filler need " + std::to_string(needed));
  }
  std::vector<hw::QualityText> texts;
  for (int w = 0; w < windows; ++w) {
    hw::QualityText t;
    t.tokens.assign(ids.begin() + w * window, ids.begin() + (w + 1) * window);
    t.prompt = prompt;
    texts.push_back(std::move(t));
  }
  const std::vector<int> filler(ids.begin() + windows * window, ids.end());
  for (int p = 0; p < probes; ++p) texts.push_back(hw::retrieval_probe(tokenizer, filler, prompt, p));
  for (int w = 0; w < windows && generate > 0; ++w) {  // the corpus prompts again, continued greedily
    hw::QualityText t;
    t.tokens.assign(ids.begin() + w * window, ids.begin() + w * window + prompt);
    t.tokens.resize(static_cast<std::size_t>(prompt + generate), 0);
    t.prompt = prompt;
    t.generate = true;
    texts.push_back(std::move(t));
  }

  // The engine's scenario, set to take every text in one batch, its workload the texts' shape
  // (what the memory model's bytes per token are for); then each candidate's KV cache on it.
  std::size_t longest = 0;
  for (const hw::QualityText& t : texts) longest = std::max(longest, t.tokens.size());
  std::vector<std::string> engine = {
      "inference.serving.max_num_seqs=" + std::to_string(std::max<std::size_t>(texts.size(), 1)),
      "inference.serving.max_num_batched_tokens=" + std::to_string(std::max<long>(prompt * static_cast<long>(texts.size()), 512)),
      "inference.serving.max_model_len=" + std::to_string(longest),
      "inference.workload.requests=" + std::to_string(texts.size()),
      "inference.workload.prompt_tokens={dist: fixed, value: " + std::to_string(prompt) + "}",
      "inference.workload.output_tokens={dist: fixed, value: " + std::to_string(continuation) + "}"};
  const std::string engine_file = (*vm)["engine"].as<std::string>();
  auto engine_scenario = [&](const std::vector<std::string>& settings) {
    std::vector<std::string> all = engine;
    all.insert(all.end(), settings.begin(), settings.end());
    return load_scenario_file(engine_file, all).scenario;
  };
  const Scenario reference = engine_scenario({});
  const KvMethod& uncompressed = kv_method(reference.inference->kv_cache.compression.method);
  if (uncompressed.compresses() || reference.inference->kv_cache.dtype != KvDtype::fp16) {
    throw UsageError("the engine scenario '" + engine_file + "' must hold an uncompressed fp16 cache: it is the reference");
  }
  std::vector<Candidate> candidates;
  if (vm->count("scenario")) {
    // The user's scenario's KV cache (method, parameters, dtype) on the real model.
    std::vector<std::string> overrides;
    if (vm->count("set")) overrides = (*vm)["set"].as<std::vector<std::string>>();
    const LoadedScenario loaded = load_scenario_file((*vm)["scenario"].as<std::string>(), overrides);
    refuse_jobs(loaded.scenario, "quality");
    if (!loaded.scenario.inference) {
      throw UsageError("'" + loaded.scenario.name + "' has no inference section: quality measures a serving scenario's KV cache");
    }
    Candidate c{std::string(kv_method(loaded.scenario.inference->kv_cache.compression.method).name()), "as the scenario sets it", 1,
                reference};
    c.scenario.inference->kv_cache = loaded.scenario.inference->kv_cache;
    candidates.push_back(std::move(c));
  } else {
    for (const KvMethod* method : kv_methods()) {
      if (!method->runs_on_devices() || !method->quality_variants) continue;
      const std::vector<double> shares = method->selection == KvSelection::all ? std::vector<double>{1.0} : budgets;
      for (const double budget : shares) {
        for (const KvQualityVariant& v : method->quality_variants(prompt, budget)) {
          std::vector<std::string> settings = {"inference.kv_cache.compression.method=" + std::string(method->name())};
          for (const std::string& s : v.settings) settings.push_back("inference.kv_cache." + s);
          candidates.push_back({std::string(method->name()), v.label, budget, engine_scenario(settings)});
        }
      }
    }
  }
  std::vector<Scenario> scenarios;
  for (const Candidate& c : candidates) scenarios.push_back(c.scenario);
  const std::vector<hw::KvQualityMeasure> measured = hw::measure_kv_quality(model, scenarios, reference, texts);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  const auto& m = model.config();
  auto bytes_per_token = [](const Scenario& s) { return serving_memory(s).kv_bytes_per_token; };
  const hw::KvQualityMeasure& first = measured.front();
  if ((*vm)["json"].as<bool>()) {
    nlohmann::ordered_json doc;
    doc["schema"] = "memtwin.quality/2";
    doc["model"] = {{"name", m.name}, {"layers", m.layers}, {"hidden", m.hidden}, {"heads", m.heads}, {"kv_heads", m.kv_heads},
                    {"head_dim", m.head_dim}, {"source_sha256", m.source_sha256}};
    doc["texts"] = {{"corpus", corpus},         {"corpus_tokens", ids.size()}, {"windows", windows}, {"prompt", prompt},
                    {"continuation", continuation}, {"probes", probes},       {"generated", generate},
                    {"positions", first.positions}};
    doc["reference"] = {{"method", std::string(uncompressed.name())}, {"perplexity", first.reference_perplexity},
                        {"retrieval", first.reference_retrieval}};
    nlohmann::ordered_json methods = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      const hw::KvQualityMeasure& q = measured[i];
      const KvCacheSpec& kv = candidates[i].scenario.inference->kv_cache;
      methods.push_back({{"method", candidates[i].method}, {"variant", candidates[i].variant}, {"budget", candidates[i].budget},
                         {"bits", kv.compression.bits}, {"dtype", std::string(kKvDtypeNames.name(kv.dtype))},
                         {"kv_bytes_per_token", bytes_per_token(candidates[i].scenario)}, {"perplexity", q.perplexity},
                         {"perplexity_delta", q.perplexity_delta}, {"kl", q.kl}, {"token_agreement", q.token_agreement},
                         {"retrieval", q.retrieval}, {"generation_agreement", q.generation_agreement}, {"tpot_s", q.tpot_s},
                         {"seconds", q.seconds}});
    }
    doc["quality"]["methods"] = methods;
    doc["seconds"] = seconds;
    std::cout << doc.dump(2) << "\n";
    return kOk;
  }
  std::printf("%s served on the host: %d corpus texts (%d-token prompts, %zu scored tokens, %d generated after each) and %d\n"
              "retrieval probes, against the fp16 cache (perplexity %.3f, probes answered %.2f)\n\n",
              m.name.c_str(), windows, prompt, first.positions, generate, probes, first.reference_perplexity, first.reference_retrieval);
  std::printf("%-10s %-22s %12s %11s %9s %9s %10s %10s %10s %9s\n", "method", "variant", "bytes/token", "perplexity", "delta", "KL",
              "agreement", "generated", "retrieval", "TPOT ms");
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const hw::KvQualityMeasure& q = measured[i];
    std::printf("%-10s %-22s %12.0f %11.3f %+9.3f %9.4f %10.3f %10.3f %10.2f %9.1f\n", candidates[i].method.c_str(),
                candidates[i].variant.c_str(), bytes_per_token(candidates[i].scenario), q.perplexity, q.perplexity_delta, q.kl,
                q.token_agreement, q.generation_agreement, q.retrieval, q.tpot_s * 1e3);
  }
  std::printf("\n%.1f s\n", seconds);
  return kOk;
}

}  // namespace memtwin::cli
