#include "models/scenario/kv_quality_file.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "models/kv/kv_method.h"

namespace memtwin {

namespace {

constexpr const char* kKey = "inference.kv_cache.quality";
constexpr std::uintmax_t kLargestDocument = 16 << 20;  // a quality document is kilobytes; refuse what is not one

}  // namespace

KvQualityMeasured read_kv_quality(const std::string& path, const KvCacheSpec& kv, double budget, const ParamValues& v) {
  auto refuse = [&](const std::string& why) { v.fail(kKey, path + ": " + why); };
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  if (error) refuse("cannot be read: " + error.message());
  if (size > kLargestDocument) refuse("is " + std::to_string(size) + " bytes, not a `memtwin quality --json` document");
  std::ifstream in(path, std::ios::binary);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    refuse(std::string("is not JSON: ") + e.what());
  }
  if (!doc.is_object() || doc.value("schema", std::string()) != "memtwin.quality/2") {
    refuse("is not a `memtwin quality --json` document (schema memtwin.quality/2)");
  }
  const auto methods = doc.contains("quality") && doc["quality"].is_object() ? doc["quality"].value("methods", nlohmann::json())
                                                                             : nlohmann::json();
  if (!methods.is_array()) refuse("has no quality.methods list");
  const KvMethod& method = kv_method(kv.compression.method);
  const std::string name(method.name()), dtype(kKvDtypeNames.name(kv.dtype));
  const bool keeps_all = method.selection == KvSelection::all;
  const nlohmann::json* best = nullptr;
  double best_distance = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < methods.size(); ++i) {
    const nlohmann::json& m = methods[i];
    const std::string at = "quality.methods[" + std::to_string(i) + "]";
    try {
      if (m.at("method").get<std::string>() != name) continue;
      // What decides the cache's precision: the quantising methods' bits, the vectors' dtype
      // (bf16 and fp16 are one precision here: 16 bits).
      if (method.quantizes() && m.at("bits").get<int>() != kv.compression.bits) continue;
      if (!method.quantizes() && (m.at("dtype").get<std::string>() == "fp8") != (kv.dtype == KvDtype::fp8)) continue;
      const double distance = keeps_all ? 0 : std::abs(m.at("budget").get<double>() - budget);
      for (const char* field : {"perplexity", "perplexity_delta", "kl", "token_agreement", "retrieval", "budget"}) {
        if (!m.at(field).is_number() || !std::isfinite(m.at(field).get<double>())) refuse(at + "." + field + " is not a finite number");
      }
      if (distance < best_distance) {
        best = &m;
        best_distance = distance;
      }
    } catch (const nlohmann::json::exception& e) {
      refuse(at + " is not a quality entry: " + e.what());
    }
  }
  if (!best) {
    refuse("holds no measurement of " + name + (method.quantizes() ? " at " + std::to_string(kv.compression.bits) + " bits" : "") +
           (method.quantizes() ? "" : " with a " + dtype + " cache") + ": run `memtwin quality` with this scenario");
  }
  KvQualityMeasured q;
  q.file = path;
  if (doc.contains("model") && doc["model"].is_object()) q.model = doc["model"].value("name", std::string());
  q.method = name;
  q.variant = best->value("variant", std::string());
  q.budget = keeps_all ? 1 : budget;
  q.measured_budget = best->at("budget").get<double>();
  q.perplexity = best->at("perplexity").get<double>();
  q.perplexity_delta = best->at("perplexity_delta").get<double>();
  q.kl = best->at("kl").get<double>();
  q.token_agreement = best->at("token_agreement").get<double>();
  q.retrieval = best->at("retrieval").get<double>();
  return q;
}

}  // namespace memtwin
