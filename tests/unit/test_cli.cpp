#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "tests/test_support.h"

using memtwin::test::run_memtwin;
using memtwin::test::source_path;

TEST_CASE("memtwin run with no scenario runs the built-in quick start", "[unit]") {
  auto r = run_memtwin({"run"});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("quickstart"));
  CHECK_THAT(r.out, Catch::Contains("model.parameters"));
}

TEST_CASE("memtwin run --json prints exactly one result document", "[unit]") {
  auto r = run_memtwin({"run", source_path("scenarios/quickstart.yaml"), "--json"});
  REQUIRE(r.exit_code == 0);
  auto doc = nlohmann::json::parse(r.out);  // throws on anything but one JSON document
  CHECK(doc["schema"] == "memtwin.result/1");
  CHECK(doc["scenario"] == "quickstart-llama3-8b-fsdp-8xh100");
  CHECK(doc["backend"] == "sim");  // the default for training
  CHECK(doc["workload"] == "training");
  CHECK(doc["input"]["cluster"]["gpu"]["preset"] == "h100-sxm");
  CHECK(doc["model"]["parameters"] == 8030261248LL);
  CHECK(doc["model"]["kv_bytes_per_token_16bit"] == 131072);
  CHECK(r.err.empty());
}

TEST_CASE("the same scenario gives byte-identical JSON", "[unit]") {
  auto a = run_memtwin({"run", source_path("scenarios/quickstart.yaml"), "--json"});
  auto b = run_memtwin({"run", source_path("scenarios/quickstart.yaml"), "--json"});
  CHECK(a.out == b.out);
}

TEST_CASE("memtwin check accepts every example scenario", "[unit]") {
  for (const auto& f : memtwin::test::files_under("scenarios", ".yaml")) {
    if (f.find("/presets/") != std::string::npos) continue;
    INFO(f);
    auto r = run_memtwin({"check", f});
    CHECK(r.exit_code == 0);
  }
}

TEST_CASE("memtwin check rejects bad scenarios with exit code 2 and a located message", "[unit]") {
  for (const auto& f : memtwin::test::files_under("tests/bad_scenarios", ".yaml")) {
    INFO(f);
    auto r = run_memtwin({"check", f});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(f) && Catch::Contains("error:"));
    CHECK(r.out.empty());
  }
}

TEST_CASE("command-line mistakes exit with 2 and say why", "[unit]") {
  CHECK(run_memtwin({"frobnicate"}).exit_code == 2);
  auto bad_backend = run_memtwin({"run", "--backend", "quantum"});
  CHECK(bad_backend.exit_code == 2);
  CHECK_THAT(bad_backend.err, Catch::Contains("unknown backend 'quantum'"));
  auto bad_set = run_memtwin({"run", "--set", "training.micro_batch"});
  CHECK(bad_set.exit_code == 2);
  CHECK_THAT(bad_set.err, Catch::Contains("expected KEY=VALUE"));
  auto missing = run_memtwin({"check", "/no/such/scenario.yaml"});
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::Contains("cannot read the scenario file"));
  // A device or a directory is refused before reading (reading /dev/zero would never end).
  for (const char* not_a_file : {"/dev/zero", "/tmp"}) {
    auto r = run_memtwin({"check", not_a_file});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("is not a regular file"));
  }
}

TEST_CASE("memtwin --version prints the project's version", "[unit]") {
  for (const char* flag : {"--version", "version"}) {
    auto r = run_memtwin({flag});
    CHECK(r.exit_code == 0);
    CHECK(r.out == std::string("memtwin ") + MEMTWIN_TEST_VERSION + "\n");
  }
}

TEST_CASE("every subcommand has --help", "[unit]") {
  for (const char* cmd : {"run", "check", "schema", "models", "gpus", "fit", "kernels", "sweep", "report"}) {
    INFO(cmd);
    auto r = run_memtwin({cmd, "--help"});
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out, Catch::Contains("usage: memtwin"));
  }
}

TEST_CASE("catalog listings name every entry", "[unit]") {
  auto models = run_memtwin({"models"});
  CHECK(models.exit_code == 0);
  for (const char* name : {"llama-2-70b", "llama-3.1-405b", "mixtral-8x7b", "opt-175b", "gpt3-175b"}) {
    CHECK_THAT(models.out, Catch::Contains(name));
  }
  auto gpus = run_memtwin({"gpus"});
  CHECK(gpus.exit_code == 0);
  for (const char* name : {"a100-40gb", "h100-sxm", "h200", "l40s", "rtx-4090"}) CHECK_THAT(gpus.out, Catch::Contains(name));
}

TEST_CASE("a scenario that does not fit exits 3, names the largest consumers and a fix", "[unit]") {
  auto r = run_memtwin({"run", source_path("scenarios/training/llama2-70b-zero2-offload-64xh100.yaml")});
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.out, Catch::Contains("does not fit") && Catch::Contains("largest: parameters"));
  CHECK_THAT(r.out, Catch::Contains("try training.sharding={strategy: zero, stage: 3}"));
  auto json = run_memtwin({"run", source_path("scenarios/training/llama2-70b-zero2-offload-64xh100.yaml"), "--json"});
  CHECK(json.exit_code == 3);
  auto doc = nlohmann::json::parse(json.out);
  CHECK(doc["memory"]["gpu"]["fits"] == false);
  CHECK(doc["memory"]["host"]["peak_bytes"].get<long long>() > 0);  // the optimizer went to the host
}

TEST_CASE("the output contract's keys are present for training and serving", "[unit]") {
  auto t = nlohmann::json::parse(run_memtwin({"run", source_path("scenarios/quickstart.yaml"), "--json"}).out);
  for (const char* k : {"peak_bytes", "capacity_bytes", "fits", "model_states_bytes"}) CHECK(t["memory"]["gpu"].contains(k));
  for (const char* k : {"parameters", "gradients", "optimizer_states", "activations", "buffers", "runtime", "fragmentation"}) {
    CHECK(t["memory"]["gpu"]["breakdown_bytes"].contains(k));
  }
  CHECK(t["memory"]["host"].contains("peak_bytes"));
  CHECK(t["memory"]["nvme"].contains("bytes"));
  auto s = nlohmann::json::parse(
      run_memtwin({"run", source_path("scenarios/serving/llama3-8b-h100-kivi4-kv.yaml"), "--json"}).out);
  CHECK(s["workload"] == "inference");
  CHECK(s["model"].contains("parameters"));
  CHECK(s["memory"]["gpu"].contains("weights_bytes"));
  CHECK(s["memory"]["gpu"].contains("peak_bytes"));
  CHECK(s["memory"]["gpu"]["fits"] == true);
  for (const char* k : {"bytes_per_token", "bytes_per_token_uncompressed", "memory_bytes", "capacity_tokens", "capacity_blocks"}) {
    CHECK(s["kv_cache"].contains(k));
  }
  CHECK(s["kv_cache"]["bytes_per_token"].get<double>() < s["kv_cache"]["bytes_per_token_uncompressed"].get<double>());
}
