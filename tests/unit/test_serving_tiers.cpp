// The serving simulation's prefix cache and KV tiers: shared prefixes, caching, tier transfers
// over the platform's links and NVMe, proactive offload, and their traffic over time.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "models/scenario_loader.h"
#include "models/serving/request_stream.h"
#include "tests/test_support.h"
#include "tests/unit/serving_helpers.h"

using namespace memtwin;
using test::kFp16;
using test::run_memtwin;
using test::serve;
using test::source_path;

TEST_CASE("shared prefixes start each prompt with its group's prefix, drawn apart from the other lengths", "[unit]") {
  auto load = [](const std::vector<std::string>& sets) { return load_scenario_file(source_path(kFp16), sets).scenario; };
  const Scenario plain = load({"inference.workload.requests=400"});
  const Scenario shared = load({"inference.workload.requests=400", "inference.workload.shared_prefix={groups: 4, tokens: 512}"});
  const auto a = generate_requests(*plain.inference, plain.seed), b = generate_requests(*shared.inference, shared.seed);
  REQUIRE(a.size() == b.size());
  std::vector<int> per_group(4, 0);
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(b[i].arrival_s == a[i].arrival_s);  // the other draws do not move
    CHECK(b[i].output_tokens <= a[i].output_tokens);
    CHECK(b[i].prompt_tokens == std::min(512 + a[i].prompt_tokens, plain.inference->serving.max_model_len - 1));
    CHECK(b[i].prefix_tokens == 512);
    REQUIRE(b[i].prefix_group >= 0);
    REQUIRE(b[i].prefix_group < 4);
    ++per_group[static_cast<std::size_t>(b[i].prefix_group)];
    CHECK(a[i].prefix_group == -1);
  }
  for (int n : per_group) CHECK(n > 60);  // about 100 each
}

TEST_CASE("prefix caching computes a shared prefix once: hits skip its prefill, and idle prefixes are evicted LRU",
          "[unit]") {
  const std::vector<std::string> load = {"inference.workload.requests=400", "inference.workload.rate=4/s",
                                         "inference.workload.shared_prefix={groups: 4, tokens: 1000}"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), load.begin(), load.end());
    return serve(kFp16, extra);
  };
  const auto off = with({}), on = with({"inference.serving.prefix_caching=true"});
  CHECK_FALSE(off.contains("prefix_cache"));
  // Every request but the first of each group finds the prefix's whole blocks (992 of its 1,000
  // tokens) in the cache; nothing is evicted from a pool this large.
  const auto& cache = on["prefix_cache"];
  CHECK(cache["cached_prompt_tokens"] == (400 - 4) * 992);
  CHECK(cache["evictions"] == 0);
  CHECK(cache["hit_rate"].get<double>() > 0.2);
  CHECK(on["latency_s"]["ttft"]["p50"].get<double>() < 0.7 * off["latency_s"]["ttft"]["p50"].get<double>());
  CHECK(on["kv_cache"]["peak_utilization"].get<double>() < off["kv_cache"]["peak_utilization"].get<double>());
  CHECK(on["requests"]["completed"] == 400);

  // Many groups and a small pool: idle prefixes are evicted to make room, and every request still completes.
  const auto tight = serve(kFp16, {"inference.workload.requests=300", "inference.workload.rate=4/s",
                                   "inference.workload.shared_prefix={groups: 200, tokens: 1000}",
                                   "inference.serving.prefix_caching=true", "inference.kv_cache.memory=2GiB"});
  CHECK(tight["prefix_cache"]["evictions"].get<int>() > 0);
  CHECK(tight["requests"]["completed"] == 300);
  CHECK(tight["kv_cache"]["peak_utilization"].get<double>() <= 1.0);
}

TEST_CASE("tier transfers cross the GPUs' PCIe links: a slower link makes fetches slower", "[unit]") {
  const std::vector<std::string> load = {"inference.workload.requests=300", "inference.workload.rate=4/s",
                                         "inference.workload.shared_prefix={groups: 200, tokens: 1000}",
                                         "inference.serving.prefix_caching=true", "inference.kv_cache.memory=2GiB",
                                         "inference.tiers.host_memory=64GiB"};
  auto fast = serve(kFp16, load);
  auto slow_load = load;
  slow_load.push_back("cluster.host.pcie_bandwidth=2GB/s");
  auto slow = serve(kFp16, slow_load);
  // The same decisions (the scheduler does not see the clock's cause), paid at the link's speed.
  CHECK(slow["tiers"]["prefix_fetch_host_bytes"].get<double>() > 0);
  CHECK(slow["latency_s"]["ttft"]["p50"].get<double>() > fast["latency_s"]["ttft"]["p50"].get<double>());
}

TEST_CASE("the KV timeline and trace carry the prefix tiers' traffic and occupancy", "[unit]") {
  const std::string dir = "/tmp/memtwin-test-serving-tier-timeline";
  const auto doc = serve(kFp16,
                         {"inference.workload.requests=300", "inference.workload.rate=4/s",
                          "inference.workload.shared_prefix={groups: 200, tokens: 1000}", "inference.serving.prefix_caching=true",
                          "inference.kv_cache.memory=2GiB", "inference.tiers.host_memory=2GiB",
                          "cluster.nvme={capacity: 2TB, read_bandwidth: 6GB/s, write_bandwidth: 3GB/s, latency: 20us}",
                          "inference.tiers.nvme=64GiB"},
                         dir);
  std::ifstream in(dir + "/kv_timeline.csv");
  std::string line;
  std::getline(in, line);
  std::vector<double> last;
  double host_peak = 0;
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    last.clear();
    for (std::string cell; std::getline(ss, cell, ',');) last.push_back(std::stod(cell));
    REQUIRE(last.size() == 11);
    host_peak = std::max(host_peak, last[9]);
  }
  // The last sample holds the run's totals (one replica) and the tiers stay within their capacity.
  CHECK(last[5] == Approx(doc["tiers"]["prefix_offload_bytes"].get<double>()));
  CHECK(last[6] == Approx(doc["tiers"]["prefix_fetch_host_bytes"].get<double>()));
  CHECK(last[7] == Approx(doc["tiers"]["prefix_fetch_nvme_bytes"].get<double>()));
  CHECK(last[8] == Approx(doc["tiers"]["nvme_write_bytes"].get<double>()));
  CHECK(last[7] > 0);
  CHECK(host_peak > 0);  // sampled after each iteration: never above the peak the tier reached
  CHECK(host_peak <= doc["tiers"]["host_peak_bytes"].get<double>());
  std::ifstream trace(dir + "/trace.json");
  std::stringstream text;
  text << trace.rdbuf();
  CHECK_THAT(text.str(), Catch::Contains("prefix tier bytes") && Catch::Contains("tier occupancy bytes"));
}

TEST_CASE("proactive offload copies idle prefixes in the background: evictions then move nothing", "[unit]") {
  const std::vector<std::string> load = {"inference.workload.requests=300", "inference.workload.rate=4/s",
                                         "inference.workload.shared_prefix={groups: 200, tokens: 1000}",
                                         "inference.serving.prefix_caching=true", "inference.kv_cache.memory=2GiB",
                                         "inference.tiers.host_memory=64GiB", "cluster.host.pcie_bandwidth=4GB/s"};
  auto on_demand = serve(kFp16, load);
  auto proactive_load = load;
  proactive_load.push_back("inference.tiers.proactive_offload=true");
  auto proactive = serve(kFp16, proactive_load);
  CHECK(proactive["requests"]["completed"] == 300);
  // Every idle prefix is copied once, whether or not it is evicted later: at least as many bytes.
  CHECK(proactive["tiers"]["prefix_offload_bytes"].get<double>() >= on_demand["tiers"]["prefix_offload_bytes"].get<double>());
  CHECK(proactive["prefix_cache"]["dropped"] == 0);
  // Nobody waits for those copies: time to first token does not get worse.
  CHECK(proactive["latency_s"]["ttft"]["p50"].get<double>() <= on_demand["latency_s"]["ttft"]["p50"].get<double>());
  // It needs a host tier to copy into.
  auto r = run_memtwin({"run", source_path(kFp16), "--backend", "sim", "--set", "inference.tiers.proactive_offload=true"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("inference.tiers.proactive_offload") && Catch::Contains("host_memory"));
}

TEST_CASE("KV tiers keep prefixes evicted from the GPU: host memory, then NVMe, fetched back instead of recomputed",
          "[unit]") {
  const std::vector<std::string> tight = {"inference.workload.requests=300", "inference.workload.rate=4/s",
                                          "inference.workload.shared_prefix={groups: 200, tokens: 1000}",
                                          "inference.serving.prefix_caching=true", "inference.kv_cache.memory=2GiB"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), tight.begin(), tight.end());
    return serve(kFp16, extra);
  };
  const auto gpu_only = with({});
  const auto host = with({"inference.tiers.host_memory=64GiB"});
  const auto both = with({"inference.tiers.host_memory=2GiB",
                          "cluster.nvme={capacity: 2TB, read_bandwidth: 6GB/s, write_bandwidth: 3GB/s, latency: 20us}",
                          "inference.tiers.nvme=64GiB"});
  // Without a tier every evicted prefix is dropped; with a large host tier none is, and fetches
  // back from it turn into cache hits.
  CHECK(gpu_only["prefix_cache"]["dropped"] == gpu_only["prefix_cache"]["evictions"]);
  CHECK(host["prefix_cache"]["dropped"] == 0);
  CHECK(host["tiers"]["prefix_fetch_host_bytes"].get<double>() > 0);
  CHECK(host["prefix_cache"]["hit_rate"].get<double>() > 2 * gpu_only["prefix_cache"]["hit_rate"].get<double>());
  CHECK(host["tiers"]["host_peak_bytes"].get<double>() <= 64.0 * (1 << 30));
  // A small host tier spills to NVMe, from which prefixes come back too; both tiers stay in bounds.
  CHECK(both["tiers"]["nvme_write_bytes"].get<double>() > 0);
  CHECK(both["tiers"]["prefix_fetch_nvme_bytes"].get<double>() > 0);
  CHECK(both["tiers"]["host_peak_bytes"].get<double>() <= 2.0 * (1 << 30));
  CHECK(both["tiers"]["nvme_peak_bytes"].get<double>() <= 64.0 * (1 << 30));
  CHECK(both["requests"]["completed"] == 300);
  // Moving bytes costs time: the NVMe tier's transfers make this load slower than host memory alone.
  CHECK(both["latency_s"]["ttft"]["p50"].get<double>() > host["latency_s"]["ttft"]["p50"].get<double>());
}


TEST_CASE("the Llama-3.1-70B TP4 long-context example: documents cached and tiered answer faster", "[unit][heavy]") {
  const std::string example = "scenarios/serving/llama3-70b-tp4-tiered-long-context.yaml";
  const auto tiered = serve(example, {}), gpu_only = serve(example, {"inference.tiers=null"}),
             uncached = serve(example, {"inference.serving.prefix_caching=false"});
  // Host DRAM and NVMe both hold evicted documents, and fetching them beats recomputing them.
  CHECK(tiered["tiers"]["prefix_fetch_host_bytes"].get<double>() > 0);
  CHECK(tiered["tiers"]["prefix_fetch_nvme_bytes"].get<double>() > 0);
  CHECK(tiered["prefix_cache"]["hit_rate"].get<double>() > gpu_only["prefix_cache"]["hit_rate"].get<double>());
  const auto ttft = [](const nlohmann::json& r) { return r["latency_s"]["ttft"]["p50"].get<double>(); };
  CHECK(ttft(tiered) < ttft(gpu_only));
  CHECK(ttft(gpu_only) < ttft(uncached));
  for (const auto* r : {&tiered, &gpu_only, &uncached}) CHECK((*r)["requests"]["completed"] == 400);
}
