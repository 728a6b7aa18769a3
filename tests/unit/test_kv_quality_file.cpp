// inference.kv_cache.quality (models/scenario/kv_quality_file.h): a serving scenario's result
// carries its KV method's quality as `memtwin quality --json` measured it, plans can require it,
// and a document without the method's measurement is refused at the key.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/test_support.h"

namespace {

using memtwin::test::run_memtwin;
using memtwin::test::source_path;

const std::string kMeasured = "data/quality/smollm2-135m.json";  // memtwin quality's defaults, recorded

nlohmann::json measured_entry(const std::string& method, const std::string& variant) {
  std::ifstream in(source_path(kMeasured));
  const nlohmann::json doc = nlohmann::json::parse(in);
  for (const auto& m : doc.at("quality").at("methods")) {
    if (m.at("method") == method && m.at("variant") == variant) return m;
  }
  FAIL("no " << method << " " << variant << " in " << kMeasured);
  return {};
}

}  // namespace

TEST_CASE("[unit] a serving result carries its KV method's measured quality: the bits for quantisers, the nearest budget for eviction",
          "[unit]") {
  const auto kivi = run_memtwin({"run", source_path("scenarios/serving/llama3-8b-h100-kivi4-kv.yaml"), "--set",
                                 "inference.kv_cache.quality=" + source_path(kMeasured), "--json"});
  REQUIRE(kivi.exit_code == 0);
  const auto q = nlohmann::json::parse(kivi.out).at("quality");
  const auto kivi4 = measured_entry("kivi", "4 bits, residual 32");  // the scenario's KIVI keeps 4 bits
  CHECK(q.at("method") == "kivi");
  CHECK(q.at("variant") == "4 bits, residual 32");
  CHECK(q.at("kl") == kivi4.at("kl"));
  CHECK(q.at("perplexity_delta") == kivi4.at("perplexity_delta"));
  CHECK(q.at("budget") == 1.0);

  // H2O keeping 10% heavy hitters and 10% recent tokens of its prompts: the 20% measurement.
  const auto h2o = run_memtwin({"run", source_path("scenarios/serving/llama3-8b-h100-h2o20-kv.yaml"), "--set",
                                "inference.kv_cache.quality=" + source_path(kMeasured), "--json"});
  REQUIRE(h2o.exit_code == 0);
  const auto e = nlohmann::json::parse(h2o.out).at("quality");
  CHECK(e.at("measured_budget") == 0.2);
  CHECK(e.at("budget").get<double>() == Approx(0.2).margin(0.01));
  CHECK(e.at("kl") == measured_entry("h2o", "20% of the prompt").at("kl"));
  CHECK(e.at("retrieval") == 0.0);
}

TEST_CASE("[unit] memtwin plan requires a KV method's measured quality", "[unit]") {
  // The smallest cache whose next-token distributions stay within 0.01 nats of fp16's: int8 (int4
  // and int2 lose more, fp16 is larger).
  const auto plan = run_memtwin({"plan", source_path("scenarios/serving/llama3-8b-h100-fp16-kv.yaml"), "--set",
                                 "inference.kv_cache.quality=" + source_path(kMeasured), "--search",
                                 "inference.kv_cache.compression.method=none,int8,int4,int2", "--require", "quality.kl <= 0.01",
                                 "--minimize", "kv_cache.bytes_per_token"});
  REQUIRE(plan.exit_code == 0);
  CHECK_THAT(plan.out, Catch::Contains("best: inference.kv_cache.compression.method=int8"));
  CHECK_THAT(plan.out, Catch::Contains("method=int4") && Catch::Contains("quality.kl <= 0.01 fails"));
}

TEST_CASE("[unit] inference.kv_cache.quality refuses a document without the method's measurement, or not quality's", "[unit]") {
  const auto dir = std::filesystem::temp_directory_path() / "memtwin-quality-file-test";
  std::filesystem::create_directories(dir);
  const auto only_int4 = dir / "only-int4.json";
  std::ofstream(only_int4) << R"({"schema": "memtwin.quality/2", "model": {"name": "m"}, "quality": {"methods": [
      {"method": "int4", "variant": "v", "budget": 1, "bits": 4, "dtype": "fp16", "perplexity": 40, "perplexity_delta": 1,
       "kl": 0.04, "token_agreement": 0.9, "retrieval": 1}]}})";
  const auto kivi = run_memtwin({"run", source_path("scenarios/serving/llama3-8b-h100-kivi4-kv.yaml"), "--set",
                                 "inference.kv_cache.quality=" + only_int4.string()});
  CHECK(kivi.exit_code == 2);
  CHECK_THAT(kivi.err, Catch::Contains("inference.kv_cache.quality") && Catch::Contains("holds no measurement of kivi at 4 bits"));
  const auto result = dir / "result.json";
  std::ofstream(result) << R"({"schema": "memtwin.result/1"})";
  const auto other = run_memtwin({"run", source_path("scenarios/serving/llama3-8b-h100-kivi4-kv.yaml"), "--set",
                                  "inference.kv_cache.quality=" + result.string()});
  CHECK(other.exit_code == 2);
  CHECK_THAT(other.err, Catch::Contains("is not a `memtwin quality --json` document"));
  const auto broken = dir / "broken.json";
  std::ofstream(broken) << R"({"schema": "memtwin.quality/2", "quality": {"methods": [{"method": "kivi", "bits": 4}]}})";
  const auto incomplete = run_memtwin({"run", source_path("scenarios/serving/llama3-8b-h100-kivi4-kv.yaml"), "--set",
                                       "inference.kv_cache.quality=" + broken.string()});
  CHECK(incomplete.exit_code == 2);
  CHECK_THAT(incomplete.err, Catch::Contains("quality.methods[0]"));
}
