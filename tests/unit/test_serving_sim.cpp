// The serving simulation (sim backend, inference scenarios), driven as subprocesses.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "models/scenario_loader.h"
#include "models/serving/iteration_cost.h"
#include "models/serving/request_stream.h"
#include "tests/test_support.h"
#include "tests/unit/serving_helpers.h"

using namespace memtwin;
using test::run_memtwin;
using test::kFp16;
using test::serve;
using test::source_path;

namespace {

struct Row {
  double arrival, first, finish;
};

std::vector<Row> read_requests(const std::string& dir) {
  std::ifstream in(dir + "/requests.csv");
  std::string line;
  std::getline(in, line);
  std::vector<Row> rows;
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::vector<double> v;
    for (std::string cell; std::getline(ss, cell, ',');) v.push_back(std::stod(cell));
    rows.push_back({v[2], v[5], v[6]});
  }
  return rows;
}

}  // namespace

TEST_CASE("an idle system: TTFT is one prefill, TPOT one decode step", "[unit]") {
  const std::vector<std::string> sets = {"inference.workload.rate=0.05/s", "inference.workload.requests=4",
                                         "inference.workload.prompt_tokens=1000", "inference.workload.output_tokens=20"};
  auto doc = serve(kFp16, sets);
  const Scenario s = load_scenario_file(source_path(kFp16), sets).scenario;
  const IterationModel model(s);
  CHECK(doc["latency_s"]["ttft"]["p50"].get<double>() == Approx(model.prefill_alone(1000)).epsilon(1e-6));
  // Decoding reads the context as it grows from 1001 to 1019 tokens: within a hair of one step at 1010.
  CHECK(doc["latency_s"]["tpot"]["p50"].get<double>() == Approx(model.decode_alone(1010)).epsilon(1e-3));
}

TEST_CASE("a sustainable open loop serves what arrives (Little's law on the simulated queue)", "[unit]") {
  const std::string dir = "/tmp/memtwin-test-serving-little";
  auto doc = serve(kFp16, {"inference.workload.rate=15/s", "inference.workload.requests=1500"}, dir);
  REQUIRE(doc["load"]["sustainable"] == true);
  const double offered = doc["load"]["offered_requests_per_s"];
  const auto rows = read_requests(dir);
  // In steady state the departure rate equals the arrival rate, and the time-average number in the
  // system (integrated from the per-request records) equals arrival rate x mean time in system.
  const double window_end = rows.back().arrival;
  double in_system = 0, sum_w = 0;
  int n = 0;
  for (const auto& r : rows) {
    REQUIRE(r.arrival <= r.first);
    REQUIRE(r.first <= r.finish);
    in_system += std::max(0.0, std::min(r.finish, window_end) - r.arrival);
    if (r.arrival < window_end * 0.8) {
      sum_w += r.finish - r.arrival;
      ++n;
    }
  }
  // The run directory also holds a Perfetto trace of the iterations with the KV counter.
  std::ifstream trace_file(dir + "/trace.json");
  const auto trace = nlohmann::json::parse(trace_file);
  int iterations = 0, counters = 0;
  for (const auto& e : trace["traceEvents"]) {
    iterations += e.value("ph", "") == "X";
    counters += e.value("ph", "") == "C";
  }
  CHECK(iterations == doc["requests"]["iterations"].get<int>());
  CHECK(counters > 0);
  const double L = in_system / window_end;
  const double W = sum_w / n;
  CHECK(L == Approx(offered * W).epsilon(0.05));
}

TEST_CASE("past saturation latency grows and the result says the load was unsustainable", "[unit]") {
  double previous = 0;
  for (const char* rate : {"10/s", "25/s", "60/s"}) {
    auto doc = serve(kFp16, {std::string("inference.workload.rate=") + rate, "inference.workload.requests=1500"});
    const double p99 = doc["latency_s"]["ttft"]["p99"];
    CHECK(p99 > previous);
    previous = p99;
    if (std::string(rate) == "60/s") {
      CHECK(doc["load"]["sustainable"] == false);
      bool noted = false;
      for (const auto& n : doc["notes"]) noted = noted || n.get<std::string>().find("unsustainable") != std::string::npos;
      CHECK(noted);
    }
  }
}

TEST_CASE("a short run below capacity is sustainable while its long requests still run, a growing queue is not",
          "[unit]") {
  // 600 requests of 6,000 prompt and 1,024 output tokens each take about 20 s to serve; the
  // arrivals last 150 s at 4/s and 100 s at 6/s.
  const std::string h2o = "scenarios/serving/llama3-8b-h100-h2o20-kv.yaml";
  const std::vector<std::string> load = {"inference.workload.requests=600",
                                         "inference.workload.prompt_tokens={dist: fixed, value: 6000}",
                                         "inference.workload.output_tokens={dist: fixed, value: 1024}"};
  auto at = [&](const char* rate) {
    auto sets = load;
    sets.push_back(std::string("inference.workload.rate=") + rate);
    return serve(h2o, sets);
  };
  const auto below = at("4/s");
  CHECK(below["load"]["sustainable"] == true);
  CHECK(below["load"]["service_allowance_s"].get<double>() > 10);  // its own service time is allowed for
  const auto above = at("6/s");
  CHECK(above["load"]["sustainable"] == false);
  CHECK(above["load"]["ttft_growth_s"].get<double>() > 5);  // later arrivals wait longer and longer
}

TEST_CASE("the Llama-3-8B examples at rising rates: KIVI and H2O hold more tokens and sustain more than fp16", "[unit]") {
  // A KV-bound load: 6,000-token prompts and 1,024 output tokens.
  const std::vector<std::string> load = {"inference.workload.requests=600",
                                         "inference.workload.prompt_tokens={dist: fixed, value: 6000}",
                                         "inference.workload.output_tokens={dist: fixed, value: 1024}"};
  struct Method {
    const char* file;
    double capacity_tokens = 0, highest_sustained = 0, ttft_p99_at_4 = 0;
  };
  std::vector<Method> methods = {{"scenarios/serving/llama3-8b-h100-fp16-kv.yaml"},
                                 {"scenarios/serving/llama3-8b-h100-kivi4-kv.yaml"},
                                 {"scenarios/serving/llama3-8b-h100-h2o20-kv.yaml"}};
  for (auto& m : methods) {
    for (const char* rate : {"2/s", "4/s", "6/s"}) {
      auto sets = load;
      sets.push_back(std::string("inference.workload.rate=") + rate);
      const auto doc = serve(m.file, sets);
      m.capacity_tokens = doc["kv_cache"]["capacity_tokens"];
      if (doc["load"]["sustainable"].get<bool>()) m.highest_sustained = std::stod(rate);
      if (std::string(rate) == "4/s") m.ttft_p99_at_4 = doc["latency_s"]["ttft"]["p99"];
    }
    INFO(m.file << ": " << m.capacity_tokens << " tokens, sustains " << m.highest_sustained << "/s, p99 TTFT at 4/s "
                << m.ttft_p99_at_4 << " s");
  }
  const Method &fp16 = methods[0], &kivi = methods[1], &h2o = methods[2];
  // Compression never lowers capacity; here it multiplies it.
  CHECK(kivi.capacity_tokens > 3 * fp16.capacity_tokens);
  CHECK(h2o.capacity_tokens > 3 * fp16.capacity_tokens);
  // fp16 runs out of KV first: the compressed caches sustain a higher rate and answer faster there.
  CHECK(fp16.highest_sustained == 2);
  CHECK(kivi.highest_sustained >= 4);
  CHECK(h2o.highest_sustained >= 4);
  CHECK(kivi.ttft_p99_at_4 < fp16.ttft_p99_at_4 / 10);
  CHECK(h2o.ttft_p99_at_4 < fp16.ttft_p99_at_4 / 10);
}

TEST_CASE("serving results are deterministic for a seed", "[unit]") {
  auto a = run_memtwin({"run", source_path(kFp16), "--backend", "sim", "--json"});
  auto b = run_memtwin({"run", source_path(kFp16), "--backend", "sim", "--json"});
  CHECK(a.out == b.out);
  auto c = run_memtwin({"run", source_path(kFp16), "--backend", "sim", "--json", "--set", "seed=2"});
  CHECK(a.out != c.out);
}

TEST_CASE("a small KV pool preempts and still completes every request - compression relieves it", "[unit]") {
  const std::vector<std::string> tight = {"inference.kv_cache.memory=3GiB", "inference.workload.rate=20/s",
                                          "inference.workload.requests=400",
                                          "inference.workload.prompt_tokens={dist: fixed, value: 2048}",
                                          "inference.workload.output_tokens={dist: fixed, value: 512}"};
  auto fp16 = serve(kFp16, tight);
  CHECK(fp16["requests"]["completed"] == 400);
  CHECK(fp16["requests"]["preemptions"].get<int>() > 0);
  auto kivi = serve("scenarios/serving/llama3-8b-h100-kivi4-kv.yaml", tight);
  CHECK(kivi["requests"]["completed"] == 400);
  CHECK(kivi["requests"]["preemptions"].get<int>() < fp16["requests"]["preemptions"].get<int>());
  CHECK(kivi["throughput"]["output_tokens_per_s"].get<double>() > fp16["throughput"]["output_tokens_per_s"].get<double>());
  // Preemption by swap, with more settings on top of the tight pool.
  auto swapping = [&](std::vector<std::string> more) {
    more.insert(more.begin(), "inference.serving.preemption=swap");
    more.insert(more.begin(), tight.begin(), tight.end());
    return serve(kFp16, more);
  };
  auto swap = swapping({});
  CHECK(swap["requests"]["completed"] == 400);
  CHECK(swap["tiers"]["host_swap_bytes"].get<double>() > 0);
  CHECK(swap["tiers"]["swap_space_peak_bytes"].get<double>() <= 4.0 * (1 << 30));
  // A swap space too small for a sequence: swap preemption falls back to recompute, and says so.
  auto small = swapping({"inference.serving.swap_space=64MiB"});
  CHECK(small["requests"]["completed"] == 400);
  CHECK(small["tiers"]["swap_space_peak_bytes"].get<double>() <= 64.0 * (1 << 20));
  CHECK(small["requests"]["preemptions"].get<int>() > 0);
  CHECK_THAT(small["notes"].dump(), Catch::Contains("no room in host memory"));
  // With a host tier the swapped KV lives there (counted in its occupancy), not in the swap space.
  auto tiered = swapping({"inference.tiers.host_memory=64GiB"});
  CHECK(tiered["requests"]["completed"] == 400);
  CHECK(tiered["tiers"]["host_swap_bytes"].get<double>() > 0);
  CHECK(tiered["tiers"]["swap_space_peak_bytes"].get<double>() == 0);
  CHECK(tiered["tiers"]["host_peak_bytes"].get<double>() > 0);
  CHECK(tiered["tiers"]["host_peak_bytes"].get<double>() <= 64.0 * (1 << 30));
}

TEST_CASE("the KV timeline carries the host-tier traffic, matching the swap total", "[unit]") {
  const std::string dir = "/tmp/memtwin-test-serving-swap-timeline";
  auto result = serve(kFp16,
                      {"inference.kv_cache.memory=3GiB", "inference.workload.rate=20/s", "inference.workload.requests=300",
                       "inference.workload.prompt_tokens={dist: fixed, value: 2048}",
                       "inference.workload.output_tokens={dist: fixed, value: 512}", "inference.serving.preemption=swap"},
                      dir);
  std::ifstream in(dir + "/kv_timeline.csv");
  std::string header;
  std::getline(in, header);
  REQUIRE(header == "time_s,replica,kv_utilization,host_swap_out_bytes,host_swap_in_bytes,prefix_to_host_bytes,"
                    "prefix_from_host_bytes,prefix_from_nvme_bytes,prefix_to_nvme_bytes,host_tier_bytes,nvme_tier_bytes");
  double last_time = -1, last_out = 0, last_in = 0;
  bool monotone = true;
  for (std::string line; std::getline(in, line);) {
    std::stringstream ss(line);
    std::string cell;
    std::vector<double> v;
    while (std::getline(ss, cell, ',')) v.push_back(std::stod(cell));
    REQUIRE(v.size() == 11);
    monotone = monotone && v[0] >= last_time && v[3] >= last_out && v[4] >= last_in && v[4] <= v[3];
    last_time = v[0];
    last_out = v[3];
    last_in = v[4];
  }
  CHECK(monotone);
  // One replica: what it swapped out is the run's swap traffic (counted out and back in), and every
  // swapped-out sequence came back to finish.
  CHECK(2 * last_out == Approx(result["tiers"]["host_swap_bytes"].get<double>()));
  CHECK(last_in == Approx(last_out));
}

TEST_CASE("closed loop keeps the concurrency - a trace replays its arrivals", "[unit]") {
  const std::string dir = "/tmp/memtwin-test-serving-closed";
  serve(kFp16, {"inference.workload.arrival=closed_loop", "inference.workload.concurrency=8",
                "inference.workload.requests=100", "inference.workload.rate=null"}, dir);
  const auto rows = read_requests(dir);
  for (const auto& r : rows) {
    int in_system = 0;
    for (const auto& o : rows) in_system += o.arrival <= r.arrival && o.finish > r.arrival;
    CHECK(in_system <= 8);
  }
  const std::string trace = "/tmp/memtwin-test-trace.csv";
  std::ofstream(trace) << "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                          "2023-11-16 18:15:46.6805900,374,44\n"
                          "2023-11-16 18:15:50.9951690,396,109\n"
                          "2023-11-16 18:15:51.5000000,879,5\n";
  const std::string tdir = "/tmp/memtwin-test-serving-trace";
  auto doc = serve(kFp16, {"inference.workload.trace=" + trace, "inference.workload.prompt_tokens=null",
                           "inference.workload.output_tokens=null", "inference.workload.rate=null",
                           "inference.workload.requests=null", "inference.workload.arrival=null"}, tdir);
  CHECK(doc["requests"]["completed"] == 3);
  const auto trows = read_requests(tdir);
  CHECK(trows[0].arrival == Approx(0.0).margin(1e-9));
  CHECK(trows[1].arrival == Approx(4.314579).epsilon(1e-6));
  // With a rate, the trace is replayed at it: 2 gaps over 4.82 s is 0.415/s; at 2/s the same
  // arrivals, 4.82 times closer together at 2/s over 0.415/s.
  const std::string rdir = "/tmp/memtwin-test-serving-trace-rate";
  serve(kFp16, {"inference.workload.trace=" + trace, "inference.workload.prompt_tokens=null",
                "inference.workload.output_tokens=null", "inference.workload.rate=2/s", "inference.workload.requests=null",
                "inference.workload.arrival=null"}, rdir);
  const auto scaled = read_requests(rdir);
  CHECK(scaled[2].arrival == Approx(1.0).epsilon(1e-6));  // 2 gaps at 2 per second
  CHECK(scaled[1].arrival / scaled[2].arrival == Approx(trows[1].arrival / trows[2].arrival).epsilon(1e-6));
}

TEST_CASE("settings the serving simulation does not model yet are named in the result, not dropped", "[unit]") {
  auto plain = serve(kFp16, {"inference.workload.requests=50"});
  auto with = serve(kFp16, {"inference.workload.requests=50", "inference.serving.prefix_caching=true",
                            "inference.kv_cache.compression={method: kivi, bits: 4}", "inference.tiers.host_memory=64GiB"});
  const std::string plain_notes = plain["notes"].dump(), notes = with["notes"].dump();
  CHECK_THAT(plain_notes, !Catch::Contains("prefix_caching") && !Catch::Contains("tiers"));
  CHECK_THAT(notes, Catch::Contains("prefixes are shared only in uncompressed or group-quantised caches; with kivi"));
  const auto tiers_alone = serve(kFp16, {"inference.workload.requests=50", "inference.tiers.host_memory=64GiB"});
  CHECK_THAT(tiers_alone["notes"].dump(), Catch::Contains("inference.tiers: the tiers hold cached prefixes evicted from the GPU, "
                                                          "and prefix caching is off"));
  CHECK(with["prefix_cache"]["hit_rate"] == 0);
}

TEST_CASE("tensor parallelism's all-reduces run as flows: on idle links the collective model's time, slower over PCIe", "[unit]") {
  const std::vector<std::string> sets = {"inference.workload.rate=0.05/s", "inference.workload.requests=4",
                                         "inference.workload.prompt_tokens=1000", "inference.workload.output_tokens=20",
                                         "cluster.gpus_per_node=2", "inference.serving.tensor_parallel=2"};
  auto doc = serve(kFp16, sets);
  const Scenario s = load_scenario_file(source_path(kFp16), sets).scenario;
  const IterationModel model(s);
  // The simulated flows on idle NVLink take exactly what the collective model says.
  CHECK(doc["latency_s"]["ttft"]["p50"].get<double>() == Approx(model.prefill_alone(1000)).epsilon(1e-6));
  CHECK(model.prefill_alone(1000) > model.compute_seconds(IterationLoad{1000, 1000 * 500.0, 0, 1}));
  // The same all-reduces over PCIe peer links (no NVLink) take longer.
  auto pcie = sets;
  pcie.push_back("cluster.intra_node.fabric=pcie");
  CHECK(serve(kFp16, pcie)["latency_s"]["ttft"]["p50"].get<double>() > doc["latency_s"]["ttft"]["p50"].get<double>());
}

TEST_CASE("pipeline-parallel replicas keep every stage busy with another batch - twice one GPU's throughput", "[unit]") {
  const std::vector<std::string> saturated = {"inference.workload.rate=60/s", "inference.workload.requests=3000"};
  auto with = [&](const char* gpus, const char* stages, std::vector<std::string> extra) {
    extra.push_back(std::string("cluster.gpus_per_node=") + gpus);
    extra.push_back(std::string("inference.serving.pipeline_parallel=") + stages);
    return serve(kFp16, extra);
  };
  const double one = with("1", "1", saturated)["throughput"]["output_tokens_per_s"];
  const double two_stages = with("2", "2", saturated)["throughput"]["output_tokens_per_s"];
  INFO("one GPU " << one << " tokens/s, two stages " << two_stages);
  // Two virtual engines, each with half the blocks, alternate on the stages: near twice the rate.
  CHECK(two_stages > 1.7 * one);
  CHECK(two_stages < 2.1 * one);
  // Idle, a request passes both stages one after another (plus the hand-over): no faster than one GPU.
  const std::vector<std::string> idle = {"inference.workload.rate=0.05/s", "inference.workload.requests=4",
                                         "inference.workload.prompt_tokens=1000", "inference.workload.output_tokens=20"};
  const double ttft_one = with("1", "1", idle)["latency_s"]["ttft"]["p50"];
  const double ttft_two = with("2", "2", idle)["latency_s"]["ttft"]["p50"];
  CHECK(ttft_two >= ttft_one);
  CHECK(ttft_two < 1.1 * ttft_one);
}


TEST_CASE("a KIVI cache shrinking as groups are quantised is scheduled through swap preemption without a livelock", "[unit]") {
  // A pool of 24 blocks for 8 sequences: decodes preempt by swap, and a sequence swapped back in
  // decodes in the next pass (it was once preempted again at once, for ever). Decodes hold blocks
  // for the tokens they cache, which for KIVI can be fewer than a token ago.
  const auto doc = serve("scenarios/host/serve-kivi-kv.yaml",
                         {"inference.workload.requests=8", "inference.workload.output_tokens={dist: fixed, value: 96}",
                          "inference.kv_cache.compression={method: kivi, bits: 2, group_size: 32, residual: 32}",
                          "inference.kv_cache.memory=1152KiB", "inference.serving.max_model_len=512",
                          "inference.serving.preemption=swap"});
  CHECK(doc["requests"]["completed"] == 8);
  CHECK(doc["requests"]["swapped"].get<int>() > 0);
}

TEST_CASE("the pre-check's serving iterations are those the simulation takes within a factor of 0.8 to 2", "[unit]") {
  // A serving run's memory and time grow with its iterations (a run of equal inter-token gaps
  // each: sim/resource_check.h), which the pre-check estimates before it starts from the batch
  // with which a replica keeps up with its arrivals. Lone long requests (one sequence an
  // iteration), a loaded replica, sixteen replicas, closed-loop clients, and disaggregated prefill
  // and decode.
  struct Case {
    std::string file;
    std::vector<std::string> sets;
  };
  const std::vector<Case> cases = {
      {kFp16, {"inference.workload.requests=200", "inference.workload.output_tokens.value=512", "inference.workload.rate=0.1/s"}},
      {kFp16, {"inference.workload.requests=3000", "inference.workload.rate=20/s"}},
      {kFp16, {"cluster.nodes=2", "cluster.gpus_per_node=8", "inference.serving.replicas=16", "inference.workload.requests=6000",
               "inference.workload.rate=320/s"}},
      {kFp16, {"inference.workload.arrival=closed_loop", "inference.workload.concurrency=64", "inference.workload.requests=2000",
               "inference.workload.rate=null"}},
      {"scenarios/serving/llama3-8b-disagg-2p2d-h100.yaml", {"inference.workload.requests=2000"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"run", source_path(c.file), "--backend", "sim", "--set", "simulation.time_limit=1us"};
    for (const auto& s : c.sets) {
      args.push_back("--set");
      args.push_back(s);
    }
    INFO(c.file << " with " << c.sets.back());
    const auto refused = run_memtwin(args);
    REQUIRE(refused.exit_code == 2);
    const std::string about = "output tokens and about ";
    const auto at = refused.err.find(about);
    REQUIRE(at != std::string::npos);
    const double estimated = std::stod(refused.err.substr(at + about.size()));
    const double ran = serve(c.file, c.sets)["requests"]["iterations"].get<double>();
    INFO("estimated " << estimated << " iterations, ran " << ran);
    CHECK(estimated >= 0.8 * ran);  // (printed to two digits)
    CHECK(estimated <= 2 * ran);
  }
}
