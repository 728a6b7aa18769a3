// memtwin validate and compare on the host device: what they refuse, report and measure, and the
// host engine's KV methods (the calibrated validation loop is test_host_validation.cpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "tests/test_support.h"

using memtwin::test::run_memtwin;
using memtwin::test::source_path;
namespace fs = std::filesystem;

namespace {

nlohmann::json read(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// The host serving scenario measured on the host engine (--backend hw), with these settings.
nlohmann::json served_on_host(const std::vector<std::string>& sets) {
  std::vector<std::string> args = {"run", source_path("scenarios/host/serve-fp16-kv.yaml"), "--backend", "hw", "--json"};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  auto r = run_memtwin(args);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.out);
}

}  // namespace

TEST_CASE("run and validate with --layers measure two shallower depths and extrapolates to the full model, where the allocator's books land on the full run's", "[unit]") {
  const std::string scenario = source_path("scenarios/host/train-zero3-2ranks.yaml");  // 4 layers, 2 ranks
  // No ZeRO-3 prefetch (a block's gather waits for the previous block's release): with the default
  // prefetch every block's gather races block 0's forward on the communication stream, and how many
  // have landed when it ends moves the allocator's peak by a block (seen under the sanitizers). Without
  // it the books follow the program's order alone.
  const std::string no_prefetch = "training.sharding.max_live_parameters=5e6";  // < 2 blocks of 3.2M
  const fs::path dir = fs::temp_directory_path() / "memtwin-layers-test";
  fs::remove_all(dir);
  const auto shallow = run_memtwin({"validate", scenario, "--set", no_prefetch, "--layers", "3", "--steps", "1", "--out", (dir / "shallow").string()});
  INFO(shallow.out << shallow.err);
  REQUIRE(shallow.exit_code == 0);
  CHECK_THAT(shallow.out, Catch::Contains("the full model (4 layers)"));
  const auto scaled = read(dir / "shallow" / "measured" / "result.json")["depth_scaling"];
  CHECK(scaled["layers"] == 4);
  CHECK(scaled["measured_layers"] == nlohmann::json::array({2, 3}));
  const auto validation = read(dir / "shallow" / "validation.json");
  CHECK(validation["depth_scaling"]["metrics"].size() == 2);  // step time and peak memory at 4 layers
  // The allocator's books are then deterministic and linear in depth from two layers a stage on: the
  // extrapolation lands on what the 4-layer step allocates. (Time is extrapolated the same way, but
  // two noisy measurements' difference is not worth a limit on this machine.)
  const auto deep = run_memtwin({"validate", scenario, "--set", no_prefetch, "--steps", "1", "--out", (dir / "full").string()});
  REQUIRE(deep.exit_code == 0);
  const auto full = read(dir / "full" / "measured" / "result.json");
  CHECK(scaled["allocated_peak_bytes"].get<double>() ==
        Approx(full["memory"]["gpu"]["allocated_peak_bytes"].get<double>()).epsilon(0.02));
  // What --layers refuses: too few layers to measure two depths, serving, another backend.
  const auto too_few = run_memtwin({"run", scenario, "--backend", "hw", "--layers", "2"});
  CHECK(too_few.exit_code == 2);
  CHECK_THAT(too_few.err, Catch::Contains("--layers must be more than 2"));
  const auto serving = run_memtwin({"run", source_path("scenarios/host/serve-fp16-kv.yaml"), "--backend", "hw", "--layers", "2"});
  CHECK(serving.exit_code == 2);
  CHECK_THAT(serving.err, Catch::Contains("training step"));
  const auto sim = run_memtwin({"run", scenario, "--layers", "3"});
  CHECK(sim.exit_code == 2);
  CHECK_THAT(sim.err, Catch::Contains("--backend hw"));
  fs::remove_all(dir);
}

TEST_CASE("compare puts two results of one plan side by side and refuses results of different plans", "[unit]") {
  const fs::path dir = fs::temp_directory_path() / "memtwin-compare-test";
  fs::create_directories(dir);
  const std::string scenario = source_path("scenarios/host/train-zero3-2ranks.yaml");
  auto save = [&](const std::vector<std::string>& extra, const std::string& name) {
    std::vector<std::string> args = {"run", scenario, "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_memtwin(args);
    REQUIRE(r.exit_code == 0);
    std::ofstream(dir / name) << r.out;
    return (dir / name).string();
  };
  const auto a = save({}, "a.json");
  const auto faster = save({"--set", "cluster.efficiency.gemm=0.5"}, "b.json");  // same plan, other platform
  const auto other = save({"--set", "training.seq_len=512"}, "c.json");           // another plan
  const auto same = run_memtwin({"compare", a, faster, "--json"});
  REQUIRE(same.exit_code == 0);
  const auto doc = nlohmann::json::parse(same.out);
  bool step = false;
  for (const auto& m : doc["metrics"]) {
    if (m["metric"] != "time.step_s") continue;
    step = true;
    CHECK(m["error_pct"].get<double>() < 0);  // A, with the faster GEMMs, predicts the shorter step
  }
  CHECK(step);
  const auto refused = run_memtwin({"compare", a, other});
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, Catch::Contains("different plans"));
  fs::remove_all(dir);
}

TEST_CASE("running out of device memory on the hardware is a result: one report, the tensor and what was free", "[unit]") {
  const fs::path out = fs::temp_directory_path() / "memtwin-validate-oom";
  fs::remove_all(out);
  const auto r = run_memtwin({"validate", source_path("scenarios/host/train-zero3-2ranks.yaml"), "--set",
                              "cluster.gpu.memory=150MiB", "--steps", "1", "--out", out.string()});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 3);
  const auto measured = read(out / "measured" / "result.json");
  CHECK(measured["memory"]["gpu"]["fits"] == false);
  const auto& oom = measured["memory"]["gpu"]["out_of_memory"];
  CHECK(oom["capacity_bytes"] == 150 << 20);
  CHECK(oom["requested_bytes"].get<std::int64_t>() > oom["free_bytes"].get<std::int64_t>());
  CHECK_FALSE(oom["tensor"].get<std::string>().empty());
  const auto validation = read(out / "validation.json");
  CHECK(validation["measured_fits"] == false);
  fs::remove_all(out);
}

TEST_CASE("the hw backend says what it cannot run instead of running something else", "[unit]") {
  const std::string serve = source_path("scenarios/host/serve-fp16-kv.yaml");
  const auto bf16 = run_memtwin({"run", serve, "--backend", "hw", "--set", "inference.weights.dtype=bf16"});
  CHECK(bf16.exit_code == 2);
  CHECK_THAT(bf16.err, Catch::Contains("fp32"));
  // KIVI's key groups (32 tokens) must not straddle blocks of 16.
  const auto kivi = run_memtwin({"run", serve, "--backend", "hw", "--set", "inference.kv_cache.compression={method: kivi}"});
  CHECK(kivi.exit_code == 2);
  CHECK_THAT(kivi.err, Catch::Contains("inference.serving.block_size") && Catch::Contains("block_size (16) must be a multiple of the group (32)"));
  const auto entropy = run_memtwin({"run", serve, "--backend", "hw", "--set", "inference.kv_cache.compression={method: entropy, budget: 64}"});
  CHECK(entropy.exit_code == 2);
  CHECK_THAT(entropy.err, Catch::Contains("entropy") && Catch::Contains("per head"));
  // Serving on --device cuda without a GPU (or without CUDA in the build) says why it cannot run;
  // where the CUDA module is built it loads (every symbol resolved), whatever the device.
  const auto cuda = run_memtwin({"run", serve, "--backend", "hw", "--device", "cuda"});
  if (cuda.exit_code != 0) {
    CHECK(cuda.exit_code == 2);
    CHECK_THAT(cuda.err, Catch::Contains("--device cuda") || Catch::Contains("without CUDA"));
    CHECK_THAT(cuda.err, !Catch::Contains("cannot load"));
  }
  // Without a GPU (or without CUDA in the build) a training step on --device cuda says why it cannot run.
  const auto no_gpu = run_memtwin({"run", source_path("scenarios/validation/torch-llama-0.9b-h200.yaml"), "--backend", "hw",
                                   "--device", "cuda"});
  if (no_gpu.exit_code != 0) {
    CHECK(no_gpu.exit_code == 2);
    CHECK_THAT(no_gpu.err, Catch::Contains("--device cuda") || Catch::Contains("without CUDA"));
  }
  const auto ranks = run_memtwin({"run", source_path("scenarios/host/train-zero3-2ranks.yaml"), "--backend", "hw"});
  CHECK(ranks.exit_code == 2);
  CHECK_THAT(ranks.err, Catch::Contains("mpirun -np 2"));
}

TEST_CASE("the host engine serves an fp8 (e4m3) KV cache: every request done, the same pool holds more", "[unit]") {
  auto run = [](const char* dtype) {
    return served_on_host({"inference.workload.requests=8", std::string("inference.kv_cache.dtype=") + dtype});
  };
  const auto fp8 = run("fp8"), fp16 = run("fp16");
  CHECK(fp8["requests"]["completed"] == 8);
  // The same pool bytes hold twice the blocks of 1-byte elements: the same requests fill less of it.
  CHECK(fp8["memory"]["gpu"]["kv_pool_bytes"] == fp16["memory"]["gpu"]["kv_pool_bytes"]);
  CHECK(fp8["kv_cache"]["peak_utilization"].get<double>() < 0.75 * fp16["kv_cache"]["peak_utilization"].get<double>());
}

TEST_CASE("the host engine runs StreamingLLM: sinks and a ring of recent tokens, a bounded cache per sequence", "[unit]") {
  const std::vector<std::string> load = {"inference.workload.requests=8", "inference.workload.output_tokens={dist: fixed, value: 96}"};
  auto streaming_sets = load;
  streaming_sets.push_back("inference.kv_cache.compression={method: streaming, sinks: 4, window: 60}");
  const auto streaming = served_on_host(streaming_sets);
  const auto full = served_on_host(load);
  CHECK(streaming["requests"]["completed"] == 8);
  // 64 tokens kept per sequence (4 blocks) instead of its whole prompt and output (about 260).
  CHECK(streaming["kv_cache"]["peak_utilization"].get<double>() < 0.4 * full["kv_cache"]["peak_utilization"].get<double>());
}

TEST_CASE("the host engine runs H2O, SnapKV and PyramidKV: prompts selected per KV head, a bounded cache per sequence", "[unit]") {
  // 8 requests with 96 outputs each; H2O keeps 30% of each prompt (heavy hitters and a recent
  // window, evicting a token per head each step), SnapKV 64 tokens of it plus the outputs,
  // PyramidKV 64 on average over the layers (each layer with a block table of its own).
  const std::vector<std::string> load = {"inference.workload.requests=8", "inference.workload.output_tokens={dist: fixed, value: 96}"};
  const auto full = served_on_host(load);
  for (const std::string method : {"{method: h2o, heavy_ratio: 0.2, recent_ratio: 0.1}", "{method: snapkv, budget: 64, window: 16}",
                                   "{method: pyramidkv, budget: 64, window: 16, beta: 5}"}) {
    INFO(method);
    auto sets = load;
    sets.push_back("inference.kv_cache.compression=" + method);
    const auto evicting = served_on_host(sets);
    CHECK(evicting["requests"]["completed"] == 8);
    CHECK(evicting["kv_cache"]["peak_utilization"].get<double>() < 0.8 * full["kv_cache"]["peak_utilization"].get<double>());
    // Each kind of work timed where it ran: every method scores its prompts (kv_selection); only
    // H2O keeps scores up to date while decoding.
    const auto& ops = evicting["op_time_s"];
    CHECK(ops["kv_selection"].get<double>() > 0);
    CHECK((ops["score_upkeep"].get<double>() > 0) == (method.find("h2o") != std::string::npos));
  }
  // Without eviction neither runs; the weight GEMMs and decode attention do, and the host's own
  // part of the forward passes is what is left of them.
  const auto& ops = full["op_time_s"];
  CHECK(ops["kv_selection"] == 0.0);
  CHECK(ops["score_upkeep"] == 0.0);
#ifndef MEMTWIN_SANITIZED
  // Timed, uninstrumented: OpenBLAS's GEMMs outweigh this short context's attention. Under the
  // sanitizers the project's own attention kernel is instrumented and OpenBLAS is not (2.9 s
  // against 2.2 s on an AMD EPYC VM), so there only their presence is checked.
  CHECK(ops["weight_gemm"].get<double>() > ops["decode_attention"].get<double>());
#endif
  CHECK(ops["weight_gemm"].get<double>() > 0);
  CHECK(ops["decode_attention"].get<double>() > 0);
  CHECK(ops["host"].get<double>() > 0);
  // The pool H2O allocates holds its fp32 scores (one per token, KV head and layer) beside K and V,
  // as the size model counts them: the pool is the same bytes with fewer blocks.
  auto h2o_sets = load;
  h2o_sets.push_back("inference.kv_cache.compression={method: h2o}");
  const auto h2o = served_on_host(h2o_sets);
  CHECK(h2o["memory"]["gpu"]["kv_pool_bytes"].get<double>() == Approx(full["memory"]["gpu"]["kv_pool_bytes"].get<double>()).epsilon(0.01));
}

TEST_CASE("the host engine runs KIVI: quantised key groups and an fp16 residual in the same pool, through preemption", "[unit]") {
  const std::vector<std::string> load = {"inference.workload.requests=8", "inference.workload.output_tokens={dist: fixed, value: 96}",
                                         "inference.serving.block_size=32"};
  const auto full = served_on_host(load);
  auto sets = load;
  sets.push_back("inference.kv_cache.compression={method: kivi, bits: 2, group_size: 32, residual: 32}");
  const auto kivi = served_on_host(sets);
  CHECK(kivi["requests"]["completed"] == 8);
  // The same pool (less than a block apart: the blocks differ) ...
  CHECK(kivi["memory"]["gpu"]["kv_pool_bytes"].get<double>() ==
        Approx(full["memory"]["gpu"]["kv_pool_bytes"].get<double>()).epsilon(0.001));
  // ... of which 2-bit groups (and a 32-token fp16 residual) fill far less than fp16 does.
  CHECK(kivi["kv_cache"]["peak_utilization"].get<double>() < 0.5 * full["kv_cache"]["peak_utilization"].get<double>());
  // A pool of 24 blocks: sequences are preempted and come back while their groups are quantised.
  // Recomputed, or swapped out and back (the engine moves the blocks over the host link, though
  // without their contents: a swapped sequence decodes on what its returning blocks hold).
  sets.insert(sets.end(), {"inference.kv_cache.memory=1152KiB", "inference.serving.max_model_len=512"});
  const auto recomputed = served_on_host(sets);
  CHECK(recomputed["requests"]["completed"] == 8);
  CHECK(recomputed["requests"]["preemptions"].get<int>() > 0);
  sets.push_back("inference.serving.preemption=swap");
  const auto swapped = served_on_host(sets);
  CHECK(swapped["requests"]["completed"] == 8);
  CHECK(swapped["requests"]["swapped"].get<int>() > 0);
}

TEST_CASE("the host engine shares cached prefixes through block tables, with a host tier below the GPU", "[unit]") {
  // Prompts of 288-400 tokens whose first 256 are one of a few shared prefixes; a KV pool of 64
  // blocks in the second run, so that prefixes are evicted to host memory and fetched back.
  auto run = [](std::vector<std::string> sets) {
    sets.insert(sets.end(), {"inference.serving.prefix_caching=true", "inference.workload.requests=24",
                             "inference.workload.rate=8/s",
                             "inference.workload.prompt_tokens={dist: normal, mean: 320, std: 48, min: 288, max: 400}"});
    return served_on_host(sets);
  };
  const auto shared = run({"inference.workload.shared_prefix={groups: 2, tokens: 256}"});
  CHECK(shared["requests"]["completed"] == 24);
  CHECK(shared["prefix_cache"]["cached_prompt_tokens"].get<double>() >= 256 * 4);  // hits skipped their prefix's prefill
  const auto tiered = run({"inference.workload.shared_prefix={groups: 6, tokens: 256}", "inference.kv_cache.memory=8MiB",
                           "inference.tiers.host_memory=1GiB"});
  CHECK(tiered["requests"]["completed"] == 24);
  CHECK(tiered["prefix_cache"]["evictions"].get<double>() > 0);
  CHECK(tiered["tiers"]["prefix_fetch_host_bytes"].get<double>() > 0);  // evicted prefixes came back from host memory
  const auto nvme = run_memtwin({"run", source_path("scenarios/host/serve-fp16-kv.yaml"), "--backend", "hw", "--set",
                                 "inference.serving.prefix_caching=true", "--set", "inference.tiers.nvme=1TB"});
  CHECK(nvme.exit_code == 2);
  CHECK_THAT(nvme.err, Catch::Contains("NVMe tier"));
}

TEST_CASE("memtwin-device measures without SimGrid: the hardware backend by default, the simulator refused", "[unit]") {
  const std::string serve = source_path("scenarios/host/serve-fp16-kv.yaml");
  auto measured = memtwin::test::run_memtwin_device({"run", serve, "--json", "--set", "inference.workload.requests=4"});
  INFO(measured.err);
  REQUIRE(measured.exit_code == 0);
  const auto doc = nlohmann::json::parse(measured.out);
  CHECK(doc["backend"] == "hw");
  CHECK(doc["requests"]["completed"] == 4);
  // The same plan as the full binary's simulation of it: compare can pair them.
  auto simulated = run_memtwin({"run", serve, "--backend", "sim", "--json", "--set", "inference.workload.requests=4"});
  REQUIRE(simulated.exit_code == 0);
  CHECK(nlohmann::json::parse(simulated.out)["simulated"]["plan_hash"] == doc["executed"]["plan_hash"]);
  auto sim = memtwin::test::run_memtwin_device({"run", serve, "--backend", "sim"});
  CHECK(sim.exit_code == 2);
  CHECK_THAT(sim.err, Catch::Contains("without SimGrid"));
}

namespace {

// Runs a serving scenario on the simulator and on the host engine with these settings, checks that
// the engine executed exactly the ops the simulator planned under the same plan hash, and returns them.
nlohmann::json planned_ops_as_executed(const std::string& scenario, const std::vector<std::string>& sets) {
  std::vector<std::string> sim = {"run", scenario, "--backend", "sim", "--json"}, hw = {"run", scenario, "--backend", "hw", "--json"};
  for (const auto& s : sets) {
    sim.insert(sim.end(), {"--set", s});
    hw.insert(hw.end(), {"--set", s});
  }
  const auto predicted = run_memtwin(sim), measured = run_memtwin(hw);
  INFO(predicted.err << measured.err);
  REQUIRE(predicted.exit_code == 0);
  REQUIRE(measured.exit_code == 0);
  const auto p = nlohmann::json::parse(predicted.out), m = nlohmann::json::parse(measured.out);
  CHECK(p["simulated"]["iteration_ops"] == m["executed"]["iteration_ops"]);
  CHECK(p["simulated"]["plan_hash"] == m["executed"]["plan_hash"]);
  CHECK(m["requests"]["completed"] == p["requests"]["completed"]);
  return p["simulated"]["iteration_ops"];
}

}  // namespace

TEST_CASE("the host engine executes exactly the ops the simulator plans, for every KV method it runs", "[unit]") {
  // One engine rule per method (models/kv): the simulator's planned ops (GEMM shapes, cache formats,
  // selection and score upkeep) and the ops the engine called must be the same set, so that the two
  // plan hashes agree and validate compares them.
  const std::string serve = source_path("scenarios/host/serve-fp16-kv.yaml");
  const std::vector<std::string> methods = {"{method: none}",
                                            "{method: int8}",
                                            "{method: int4}",
                                            "{method: int2}",
                                            "{method: kivi, bits: 2}",
                                            "{method: kivi, bits: 4}",
                                            "{method: streaming, sinks: 4, window: 60}",
                                            "{method: h2o, heavy_ratio: 0.2, recent_ratio: 0.1}",
                                            "{method: snapkv, budget: 64, window: 16}",
                                            "{method: pyramidkv, budget: 64, window: 16}"};
  for (const std::string& method : methods) {
    INFO(method);
    // KIVI's key groups of 32 tokens must not straddle two blocks.
    const std::string block = method.find("kivi") != std::string::npos ? "32" : "16";
    const auto planned = planned_ops_as_executed(serve, {"inference.kv_cache.compression=" + method, "inference.workload.requests=6",
                                                         "inference.serving.block_size=" + block});
    // Every weight GEMM of the model and the cache format's attention are in the plan.
    CHECK(planned.size() >= 8);
  }
}

TEST_CASE("the host engine serves a mixture of experts through the ops the simulator plans: the router, then each expert", "[unit]") {
  const std::string serve = source_path("scenarios/host/serve-moe-kv.yaml");
  const auto planned = planned_ops_as_executed(serve, {"inference.workload.requests=6"});
  // The router's logits over 8 experts, and an expert's gate-up (2 x 384 outputs) and down GEMMs.
  for (const char* op : {"weight_gemm 512x8", "weight_gemm 512x768", "weight_gemm 384x512"}) {
    INFO(op);
    CHECK(std::find(planned.begin(), planned.end(), op) != planned.end());
  }
}

TEST_CASE("compare says which ops two serving plans differ in", "[unit]") {
  const fs::path dir = fs::temp_directory_path() / "memtwin-compare-ops";
  fs::create_directories(dir);
  const auto a = run_memtwin({"run", source_path("scenarios/host/serve-fp16-kv.yaml"), "--json", "--set", "inference.workload.requests=4"});
  REQUIRE(a.exit_code == 0);
  nlohmann::json first = nlohmann::json::parse(a.out), second = first;
  // The same run, but an engine that wrote its cache as int8 and called one GEMM more.
  auto& ops = second["simulated"]["iteration_ops"];
  ops.erase(std::find(ops.begin(), ops.end(), "kv_write fp16"));
  ops.push_back("kv_write int8");
  ops.push_back("weight_gemm 7x7");
  second["simulated"]["plan_hash"] = "0123456789abcdef";
  std::ofstream(dir / "a.json") << first.dump();
  std::ofstream(dir / "b.json") << second.dump();
  const auto r = run_memtwin({"compare", (dir / "a.json").string(), (dir / "b.json").string()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("only the first ran kv_write fp16") &&
                        Catch::Contains("only the second ran kv_write int8, weight_gemm 7x7"));
  fs::remove_all(dir);
}

TEST_CASE("compare --what-if puts two results of different plans side by side: B's change from A and the keys that differ",
          "[unit]") {
  const fs::path dir = fs::temp_directory_path() / "memtwin-what-if-test";
  fs::create_directories(dir);
  const std::string scenario = source_path("scenarios/serving/llama3-8b-h100-fp16-kv.yaml");
  auto save = [&](const std::vector<std::string>& extra, const std::string& name) {
    std::vector<std::string> args = {"run", scenario, "--json", "--set", "inference.workload.requests=100"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_memtwin(args);
    REQUIRE(r.exit_code == 0);
    std::ofstream(dir / name) << r.out;
    return nlohmann::json::parse(r.out);
  };
  const auto a = save({}, "a.json");
  const auto b = save({"--set", "inference.kv_cache.compression.method=int4"}, "b.json");
  const auto plain = run_memtwin({"compare", (dir / "a.json").string(), (dir / "b.json").string()});
  CHECK(plain.exit_code == 2);
  CHECK_THAT(plain.err, Catch::Contains("--what-if"));
  const auto r = run_memtwin({"compare", (dir / "a.json").string(), (dir / "b.json").string(), "--what-if", "--json"});
  REQUIRE(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  // The key the second run changed and the default int4 brings (its group size), nothing else.
  REQUIRE(doc["inputs_changed"].size() == 2);
  CHECK(doc["inputs_changed"][0] == nlohmann::json({{"key", "inference.kv_cache.compression.group_size"}, {"a", nullptr}, {"b", 32}}));
  CHECK(doc["inputs_changed"][1] == nlohmann::json({{"key", "inference.kv_cache.compression.method"}, {"a", "none"}, {"b", "int4"}}));
  bool tpot = false;
  for (const auto& m : doc["metrics"]) {
    if (m["metric"] != "latency_s.tpot.p50") continue;
    tpot = true;
    const double av = a["latency_s"]["tpot"]["p50"], bv = b["latency_s"]["tpot"]["p50"];
    CHECK(m["a"].get<double>() == av);
    CHECK(m["b"].get<double>() == bv);
    CHECK(m["change_pct"].get<double>() == Approx((bv - av) / av * 100));
  }
  CHECK(tpot);
  fs::remove_all(dir);
}
