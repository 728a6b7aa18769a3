// The KV-method registry (models/kv/kv_method.h): every method has one descriptor, and what the
// loader, the schema, the cost model and the engines ask of it holds for every method in it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>

#include "models/kv/kv_method.h"
#include "models/scenario/scenario_error.h"
#include "models/scenario_loader.h"
#include "models/schema.h"
#include "tests/test_support.h"

using namespace memtwin;

namespace {

const std::string kScenario = "scenarios/serving/llama3-8b-h100-fp16-kv.yaml";
const std::string kKey = "inference.kv_cache.compression.";

Scenario load(const std::vector<std::string>& overrides) {
  return load_scenario_file(test::source_path(kScenario), overrides).scenario;
}

// A value inside the parameter's bounds that the method accepts with its other defaults.
std::string valid_value(const KvMethod& m, const KvParameter& p) {
  if (p.key == "bits") return "4";
  if (p.key == "window") return m.selection == KvSelection::prompt_vote ? "16" : "500";
  if (p.key == "pooling_kernel") return "5";
  if (p.key == "residual") return "64";
  if (p.kind == ValueKind::number) return p.key == "beta" ? "8" : "0.2";
  return "64";
}

bool reads(const KvMethod& m, const std::string& key) {
  return std::any_of(m.parameters.begin(), m.parameters.end(), [&](const KvParameter& p) { return p.key == key; });
}

}  // namespace

TEST_CASE("every KV method has one descriptor, and its size model carries its name", "[unit]") {
  std::set<KvCompression> seen;
  for (const KvMethod* m : kv_methods()) {
    CHECK(seen.insert(m->id).second);
    CHECK(&kv_method(m->id) == m);
    const Scenario s = load({kKey + "method=" + std::string(m->name())});
    CHECK(s.inference->kv_cache.compression.method == m->id);
    const auto kv = make_kv_compressor(s.inference->kv_cache.compression, KvShape{32, 8, 128, 2});
    INFO(m->name());
    CHECK(kv->name().rfind(std::string(m->name()), 0) == 0);  // kivi's size model says kivi2 or kivi4
    CHECK(kv->bytes_per_stored_token() > 0);
  }
  CHECK(seen.size() == kKvCompressionNames.names.size());
}

TEST_CASE("each method takes its own parameters and refuses every other method's", "[unit]") {
  for (const KvMethod* m : kv_methods()) {
    const std::string method = kKey + "method=" + std::string(m->name());
    for (const ParamSpec& spec : kv_compression_schema()) {
      const std::string key = spec.path.substr(kKey.size());
      INFO(m->name() << " with " << key);
      if (reads(*m, key)) {
        const auto param = std::find_if(m->parameters.begin(), m->parameters.end(), [&](const KvParameter& p) { return p.key == key; });
        CHECK_NOTHROW(load({method, spec.path + "=" + valid_value(*m, *param)}));
        // The schema documents the key with every method that reads it.
        CHECK(spec.doc.find(std::string(m->name())) != std::string::npos);
      } else {
        const std::string inside_bounds = spec.kind == ValueKind::number ? (key == "beta" ? "2" : "0.5") : "2";
        CHECK_THROWS_WITH(load({method, spec.path + "=" + inside_bounds}),
                          Catch::Contains("is not a parameter of method " + std::string(m->name())));
      }
    }
  }
}

TEST_CASE("a method's own default applies where methods differ, and the schema says so", "[unit]") {
  CHECK(load({kKey + "method=streaming"}).inference->kv_cache.compression.window == 1020);
  CHECK(load({kKey + "method=snapkv"}).inference->kv_cache.compression.window == 32);
  CHECK(load({kKey + "method=kivi"}).inference->kv_cache.compression.bits == 2);
  CHECK(load({kKey + "method=int4"}).inference->kv_cache.compression.bits == 4);
  const auto schema = kv_compression_schema();
  const auto window = std::find_if(schema.begin(), schema.end(), [&](const ParamSpec& p) { return p.path == kKey + "window"; });
  REQUIRE(window != schema.end());
  CHECK_FALSE(window->default_value);
  CHECK(window->default_note == "streaming 1020, snapkv/pyramidkv 32");
  // Each key is one entry of the whole schema.
  std::set<std::string> paths;
  for (const ParamSpec& p : schema_params()) CHECK(paths.insert(p.path).second);
}

TEST_CASE("every method's decode kernel format is a calibration key the schema declares", "[unit]") {
  std::set<std::string> formats;
  for (const KvKernelFormat& f : kv_kernel_formats()) CHECK(formats.insert(f.name).second);
  std::set<std::string> keys;
  for (const ParamSpec& p : schema_params()) keys.insert(p.path);
  for (const KvMethod* m : kv_methods()) {
    for (const char* dtype : {"bf16", "fp8"}) {
      for (const char* bits : {"2", "4"}) {
        std::vector<std::string> overrides = {kKey + "method=" + std::string(m->name()), "inference.kv_cache.dtype=" + std::string(dtype)};
        if (reads(*m, "bits")) overrides.push_back(kKey + "bits=" + std::string(bits));
        const Scenario s = load(overrides);
        const std::string format = decode_kernel_format(s.inference->kv_cache);
        INFO(m->name() << " " << dtype << " " << bits << ": " << format);
        CHECK(formats.count(format) == 1);
        CHECK(keys.count("cluster.kernels.decode_attention." + format) == 1);
        CHECK(keys.count("cluster.kernels.kv_write." + format) == 1);
        const std::string residual = residual_kernel_format(s.inference->kv_cache);
        CHECK((residual.empty() || keys.count("cluster.kernels.decode_attention." + residual) == 1));
        CHECK(residual.empty() == (m->storage != KvStorage::channel_key_groups));
      }
    }
  }
}

TEST_CASE("capabilities: prefix sharing needs whole tokens in one form, scoring needs a scored selection", "[unit]") {
  for (const KvMethod* m : kv_methods()) {
    INFO(m->name());
    const bool whole_tokens = m->selection == KvSelection::all && m->storage != KvStorage::channel_key_groups;
    CHECK(m->shares_prefix_blocks() == whole_tokens);
    CHECK(m->quantizes() == (m->storage != KvStorage::vectors));
    CHECK(m->runs_on_devices() == m->simulated_only_because.empty());
    // Layers with budgets of their own need the prompt-voting selection that sets them.
    if (m->per_layer_budgets) CHECK(m->selection == KvSelection::prompt_vote);
  }
  CHECK(shares_prefix_blocks(KvCompression::none));
  CHECK_FALSE(shares_prefix_blocks(KvCompression::kivi));
  CHECK(kv_method(KvCompression::h2o).scores_tokens());
  CHECK_FALSE(kv_method(KvCompression::streaming).scores_tokens());
}
