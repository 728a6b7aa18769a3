// memtwin quality: what each KV-cache format costs in quality, measured on a real model's weights
// with the project's KV kernels (hw/host/real_model.h, hw/host/kv_quality_measure.h).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "apps/memtwin/commands.h"
#include "apps/memtwin/options.h"
#include "hw/device_model.h"
#include "hw/host/bpe_tokenizer.h"
#include "hw/host/kv_quality_measure.h"
#include "hw/host/real_model.h"
#include "models/backend.h"
#include "models/kv/kv_method.h"
#include "models/scenario_loader.h"

namespace po = boost::program_options;

namespace memtwin::cli {

namespace {

struct Candidate {
  std::string method;  ///< inference.kv_cache.compression.method
  std::string cache;   ///< what the cache holds, e.g. "int4, groups of 32"
  kernels::KvFormat format;
};

Candidate candidate(const std::string& method, kernels::KvElement element, int group, int head_dim) {
  Candidate c{method, kernels::element_name(element), {}};
  c.format.element = element;
  c.format.head_dim = head_dim;
  c.format.group = group;
  if (c.format.quantized()) c.cache += ", groups of " + std::to_string(group);
  return c;
}

// The scenario's KV cache on the real model: its format (hw::kv_format decides it, as for the
// serving engine) at the real model's head size.
Candidate from_scenario(const Scenario& s, int head_dim) {
  if (!s.inference) throw UsageError("'" + s.name + "' has no inference section: quality measures a serving scenario's KV cache");
  const CompressionSpec& spec = s.inference->kv_cache.compression;
  const KvMethod& method = kv_method(spec.method);
  if (method.selection != KvSelection::all || method.storage == KvStorage::channel_key_groups) {
    throw Unsupported("the real model measures caches that keep every token per token (none with fp16 or fp8, int8, int4, "
                      "int2); '" + std::string(method.name()) + "' " +
                      (method.storage == KvStorage::channel_key_groups ? "groups keys per channel" : "evicts tokens") +
                      ", which it does not run yet");
  }
  kernels::KvFormat f = hw::kv_format(s);
  if (f.quantized() && (f.group > head_dim || head_dim % f.group != 0)) {
    throw Unsupported("inference.kv_cache.compression.group_size " + std::to_string(f.group) + " does not divide the real model's head size " +
                      std::to_string(head_dim));
  }
  Candidate c = candidate(std::string(method.name()), f.element, f.group, head_dim);
  return c;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot read the corpus '" + path + "'");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  if (text.empty()) throw UsageError("the corpus '" + path + "' is empty");
  return text;
}

}  // namespace

int cmd_quality(const Args& args) {
  po::options_description options("options");
  options.add_options()
      ("scenario", po::value<std::string>(), "a serving scenario: measure its KV cache (default: fp16, fp8, int8, int4, int2)")
      ("set", po::value<std::vector<std::string>>()->composing(), "override a scenario key (repeatable)")
      ("model", po::value<std::string>()->default_value(MEMTWIN_REAL_MODEL_DIR), "the converted model (scripts/real-model.sh)")
      ("corpus", po::value<std::string>()->default_value(MEMTWIN_CORPUS_FILE), "plain UTF-8 text to score")
      ("window", po::value<int>()->default_value(256), "tokens per window (each scored from its start)")
      ("windows", po::value<int>()->default_value(2), "windows, taken from the corpus's start")
      ("group", po::value<int>()->default_value(32), "quantisation group of the default set's integer formats")
      ("json", po::bool_switch(), "print JSON");
  po::positional_options_description positional;
  positional.add("scenario", 1);
  auto vm = parse_args(args, options, positional,
                       "usage: memtwin quality [SCENARIO] [--corpus FILE] [--window N] [--windows K] [--json]\n\n"
                       "Runs a real model (SmolLM2-135M on the host, installed by scripts/real-model.sh) over a text\n"
                       "with its KV cache in each format and reports, against the fp16 cache: perplexity and its\n"
                       "delta, the mean KL divergence of the next-token distributions and the share of positions\n"
                       "whose most likely next token agrees (docs/real-model.md).");
  if (!vm) return kOk;
  const int window = (*vm)["window"].as<int>(), windows = (*vm)["windows"].as<int>(), group = (*vm)["group"].as<int>();
  if (window < 2 || window > 8192) throw UsageError("--window must be between 2 and 8192 tokens");
  if (windows < 1 || windows > 1024) throw UsageError("--windows must be between 1 and 1024");

  const auto started = std::chrono::steady_clock::now();
  const std::string model_dir = (*vm)["model"].as<std::string>();
  const hw::RealModel model = hw::RealModel::load(model_dir);
  const hw::BpeTokenizer tokenizer = hw::BpeTokenizer::load(std::filesystem::path(model_dir) / "tokenizer.json");
  const int head_dim = model.config().head_dim;
  if (group < 1 || head_dim % group != 0) {
    throw UsageError("--group must divide the model's head size " + std::to_string(head_dim));
  }
  std::vector<Candidate> candidates;
  const Candidate reference = candidate(std::string(kv_method(CompressionSpec{}.method).name()), kernels::KvElement::fp16, group, head_dim);  // the uncompressed default
  if (vm->count("scenario")) {
    std::vector<std::string> overrides;
    if (vm->count("set")) overrides = (*vm)["set"].as<std::vector<std::string>>();
    const LoadedScenario loaded = load_scenario_file((*vm)["scenario"].as<std::string>(), overrides);
    refuse_jobs(loaded.scenario, "quality");
    candidates.push_back(from_scenario(loaded.scenario, head_dim));
  } else {
    // Every cache that keeps each token per token, as the registry lists them: the kernel formats
    // of the methods that keep every token as vectors or per-token groups.
    for (const KvMethod* method : kv_methods()) {
      if (method->selection != KvSelection::all || method->storage == KvStorage::channel_key_groups) continue;
      for (const KvKernelFormat& format : method->kernel_formats) {
        for (auto e : {kernels::KvElement::fp16, kernels::KvElement::fp8, kernels::KvElement::int8, kernels::KvElement::int4,
                       kernels::KvElement::int2}) {
          if (format.name == kernels::element_name(e)) candidates.push_back(candidate(std::string(method->name()), e, group, head_dim));
        }
      }
    }
  }

  const std::string corpus = (*vm)["corpus"].as<std::string>();
  const std::vector<int> ids = tokenizer.encode(read_text(corpus));
  if (static_cast<long>(ids.size()) < static_cast<long>(window) * windows) {
    throw UsageError("the corpus has " + std::to_string(ids.size()) + " tokens, fewer than --windows x --window = " +
                     std::to_string(static_cast<long>(window) * windows));
  }
  std::vector<std::vector<int>> texts;
  for (int w = 0; w < windows; ++w) {
    texts.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(w) * window, ids.begin() + static_cast<std::ptrdiff_t>(w + 1) * window);
  }
  std::vector<kernels::KvFormat> formats;
  for (const Candidate& c : candidates) formats.push_back(c.format);
  const std::vector<hw::KvQualityMeasure> measured = hw::measure_kv_quality(model, texts, formats, reference.format);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  const auto& m = model.config();
  // The cache's bytes per token for the whole model: K and V of every KV head in every layer.
  auto bytes_per_token = [&](const kernels::KvFormat& f) {
    return static_cast<double>(f.vector_bytes()) * 2 * m.kv_heads * m.layers;
  };
  if ((*vm)["json"].as<bool>()) {
    nlohmann::ordered_json doc;
    doc["schema"] = "memtwin.quality/1";
    doc["model"] = {{"name", m.name}, {"layers", m.layers}, {"hidden", m.hidden}, {"heads", m.heads}, {"kv_heads", m.kv_heads},
                    {"head_dim", m.head_dim}, {"source_sha256", m.source_sha256}};
    doc["corpus"] = {{"file", corpus}, {"tokens", ids.size()}, {"windows", windows}, {"window", window},
                     {"positions", measured.front().positions}};
    doc["reference"] = {{"method", reference.method}, {"cache", reference.cache},
                        {"perplexity", measured.front().reference_perplexity}};
    nlohmann::ordered_json methods = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      const hw::KvQualityMeasure& q = measured[i];
      methods.push_back({{"method", candidates[i].method}, {"cache", candidates[i].cache}, {"budget", 1.0},
                         {"kv_bytes_per_token", bytes_per_token(candidates[i].format)}, {"perplexity", q.perplexity},
                         {"perplexity_delta", q.perplexity_delta}, {"kl", q.kl}, {"token_agreement", q.token_agreement},
                         {"attention_s_per_token", q.attention_s_per_token}});
    }
    doc["quality"]["methods"] = methods;
    doc["seconds"] = seconds;
    std::cout << doc.dump(2) << "\n";
    return kOk;
  }
  std::printf("%s on %s: %d windows of %d tokens (%zu predicted), against the %s cache (perplexity %.3f)\n\n", m.name.c_str(),
              corpus.c_str(), windows, window, measured.front().positions, reference.cache.c_str(),
              measured.front().reference_perplexity);
  std::printf("%-8s %-20s %14s %11s %9s %10s %10s %16s\n", "method", "cache", "bytes/token", "perplexity", "delta", "KL (nats)",
              "agreement", "attention us/tok");
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const hw::KvQualityMeasure& q = measured[i];
    std::printf("%-8s %-20s %14.0f %11.3f %+9.3f %10.5f %10.3f %16.1f\n", candidates[i].method.c_str(), candidates[i].cache.c_str(),
                bytes_per_token(candidates[i].format), q.perplexity, q.perplexity_delta, q.kl, q.token_agreement,
                q.attention_s_per_token * 1e6);
  }
  std::printf("\n%.1f s\n", seconds);
  return kOk;
}

}  // namespace memtwin::cli
