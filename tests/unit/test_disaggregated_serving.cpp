// Disaggregated serving (inference.disaggregation): prefill instances hand each prompt's KV cache to
// a decode instance over the cluster's links; the first token reaches the client after the transfer.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/test_support.h"
#include "tests/unit/serving_helpers.h"

using namespace memtwin;
using test::run_memtwin;
using test::serve;
using test::source_path;

namespace {

const std::string kDisagg = "scenarios/serving/llama3-8b-disagg-2p2d-h100.yaml";

std::vector<std::string> with(std::vector<std::string> sets) {
  sets.insert(sets.begin(), "inference.workload.requests=400");
  return sets;
}

}  // namespace

TEST_CASE("a disaggregated run sends each prompt's KV cache: its tokens x the cache's bytes per token, compressed where configured",
          "[unit]") {
  for (const std::vector<std::string>& sets :
       {std::vector<std::string>{}, {"inference.kv_cache.compression={method: int4}"},
        {"inference.disaggregation.prefill.tensor_parallel=2", "inference.disaggregation.prefill.replicas=1"}}) {
    INFO((sets.empty() ? "fp16" : sets.front()));
    const auto r = serve(kDisagg, with(sets));
    const auto& transfer = r["disaggregation"]["kv_transfer"];
    CHECK(transfer["requests"] == 400);
    // kv_cache.bytes_per_token is one GPU's share: the prefill instance's GPUs together send all of it.
    const double per_token = r["kv_cache"]["bytes_per_token_uncompressed"].get<double>();
    if (sets.empty() || sets.front().find("tensor_parallel") != std::string::npos) {
      CHECK(transfer["bytes_per_prompt_token"].get<double>() == Approx(2.0 * 32 * 8 * 128 * 2));  // K, V x layers x KV heads x head_dim x fp16
      CHECK(per_token == Approx(2.0 * 32 * 8 * 128 * 2));
      // Each side's GEMMs at its own tensor parallelism: Llama-3-8B's fused QKV, 4096 x 6144 whole.
      const auto& ops = r["simulated"]["iteration_ops"];
      auto has = [&](const char* op) { return std::find(ops.begin(), ops.end(), op) != ops.end(); };
      CHECK(has("weight_gemm 4096x6144"));
      CHECK(has("weight_gemm 4096x3072") == !sets.empty());
    } else {
      CHECK(transfer["bytes_per_prompt_token"].get<double>() == Approx(r["kv_cache"]["bytes_per_token"].get<double>()).epsilon(1e-6));
      CHECK(transfer["bytes_per_prompt_token"].get<double>() < 0.35 * per_token);  // 4-bit codes and their group scales
    }
  }
}

TEST_CASE("a disaggregated request's first token comes after its prefill and its KV transfer, which the fabric paces", "[unit]") {
  const auto fast = serve(kDisagg, with({}));
  const auto slow = serve(kDisagg, with({"cluster.inter_node.nic_bandwidth=100Gbps"}));
  for (const auto* r : {&fast, &slow}) {
    const auto& d = (*r)["disaggregation"];
    const double ttft = (*r)["latency_s"]["ttft"]["mean"].get<double>();
    const double prefill_end = d["ttft_s"]["to_prefill_end"]["mean"].get<double>();
    const double transfer = d["kv_transfer"]["seconds"]["mean"].get<double>();
    CHECK(transfer > 0);
    CHECK(ttft >= prefill_end + transfer - 1e-9);
    CHECK(ttft == Approx(prefill_end + transfer).epsilon(1e-9));  // nothing else between them
  }
  // The transfer crosses the nodes' NICs (prefill on node 0, decode on node 1): no faster than the
  // NIC, and a quarter of the NIC takes at least about four times as long (more where transfers
  // that now last longer overlap and share it).
  const auto& fast_t = fast["disaggregation"]["kv_transfer"];
  const auto& slow_t = slow["disaggregation"]["kv_transfer"];
  CHECK(fast_t["seconds"]["mean"].get<double>() >= fast_t["bytes"]["mean"].get<double>() / 50e9 * 0.999);
  CHECK(slow_t["seconds"]["mean"].get<double>() >= slow_t["bytes"]["mean"].get<double>() / 12.5e9 * 0.999);
  CHECK(slow_t["seconds"]["mean"].get<double>() > 3.5 * fast_t["seconds"]["mean"].get<double>());
}

TEST_CASE("layer-wise KV transfer streams during the prefill: the same bytes, only the last layer's after it", "[unit]") {
  for (const std::string nic : {"400Gbps", "100Gbps"}) {
    INFO(nic);
    const auto whole = serve(kDisagg, with({"cluster.inter_node.nic_bandwidth=" + nic}));
    const auto streamed = serve(kDisagg, with({"cluster.inter_node.nic_bandwidth=" + nic, "inference.disaggregation.layerwise_transfer=true"}));
    const auto& w = whole["disaggregation"];
    const auto& s = streamed["disaggregation"];
    CHECK(s["kv_transfer"]["bytes_total"].get<double>() == w["kv_transfer"]["bytes_total"].get<double>());
    // What the decode still waits for after the prefill: at least the last of 32 layers over the
    // NIC, and less than the whole cache took.
    const double nic_bytes_per_s = nic == "400Gbps" ? 50e9 : 12.5e9;
    const double exposed = s["kv_transfer"]["seconds"]["mean"].get<double>();
    CHECK(exposed >= s["kv_transfer"]["bytes"]["mean"].get<double>() / 32 / nic_bytes_per_s * 0.999);
    CHECK(exposed < 0.5 * w["kv_transfer"]["seconds"]["mean"].get<double>());
    const double ttft = streamed["latency_s"]["ttft"]["mean"].get<double>();
    CHECK(ttft == Approx(s["ttft_s"]["to_prefill_end"]["mean"].get<double>() + exposed).epsilon(1e-9));
    CHECK(ttft < whole["latency_s"]["ttft"]["mean"].get<double>());
  }
}

TEST_CASE("disaggregated decodes do not wait for prefills, where the same GPUs colocated do", "[unit]") {
  const auto disaggregated = serve(kDisagg, with({}));
  const auto colocated = serve(kDisagg, with({"inference.disaggregation=null", "inference.serving.replicas=4"}));
  CHECK_FALSE(colocated.contains("disaggregation"));
  auto spread = [](const nlohmann::json& r) {
    return r["latency_s"]["tpot"]["p99"].get<double>() / r["latency_s"]["tpot"]["p50"].get<double>();
  };
  INFO("disaggregated p99/p50 " << spread(disaggregated) << ", colocated " << spread(colocated));
  CHECK(spread(disaggregated) < 1.1);   // decode batches only: every step about as long
  CHECK(spread(colocated) > 1.15);      // steps that carry a long prefill stretch the decodes in them
  CHECK(disaggregated["latency_s"]["tpot"]["p99"].get<double>() < colocated["latency_s"]["tpot"]["p99"].get<double>());
  CHECK(disaggregated["requests"]["completed"] == 400);
}

TEST_CASE("plan searches the prefill:decode split and counts both sides' GPUs", "[unit]") {
  const auto r = run_memtwin({"plan", source_path(kDisagg), "--set", "inference.workload.requests=100", "--search",
                              "inference.disaggregation.decode.replicas=1,2", "--minimize", "gpus", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto plan = nlohmann::json::parse(r.out);
  CHECK(plan["winner"]["overrides"] == nlohmann::json::array({"inference.disaggregation.decode.replicas=1"}));
  CHECK(plan["winner"]["gpus"] == 3);  // two prefill instances and one decode instance, one GPU each
}

TEST_CASE("a side on a GPU type of its own runs on that GPU, on nodes of its own", "[unit]") {
  const auto h100 = serve(kDisagg, with({}));
  const auto a100 = serve(kDisagg, with({"inference.disaggregation.decode.gpu=a100-80gb"}));
  CHECK(a100["disaggregation"]["decode"]["gpu"] == "a100-80gb");
  CHECK(a100["disaggregation"]["prefill"]["gpu"] == "h100-sxm");
  // The decode instances hold the KV caches: the deployment's memory is theirs, the A100's 80 GiB.
  CHECK(a100["memory"]["gpu"]["capacity_bytes"] == 80.0 * (1 << 30));
  // Decode steps read the weights and the KV from HBM: their time follows the bandwidth
  // (3.35 TB/s on the H100, 2.04 on the A100: 1.64x), within 15%.
  const double tpot_ratio = a100["latency_s"]["tpot"]["p50"].get<double>() / h100["latency_s"]["tpot"]["p50"].get<double>();
  CHECK(tpot_ratio == Approx(3.35 / 2.039).epsilon(0.15));
  // The prefill side is the same H100s, and each side was on a node of its own already.
  CHECK(a100["disaggregation"]["ttft_s"]["to_prefill_end"]["p50"] == h100["disaggregation"]["ttft_s"]["to_prefill_end"]["p50"]);
  // One prefill and one decode instance: of one type they share node 0 and the KV crosses NVLink;
  // of two types the decode instance is on node 1 and the KV crosses the NICs.
  const std::vector<std::string> two = {"inference.disaggregation.prefill.replicas=1", "inference.disaggregation.decode.replicas=1",
                                        "inference.workload.rate=4/s"};
  auto two_with = [&](std::vector<std::string> more) {
    more.insert(more.end(), two.begin(), two.end());
    return with(more);
  };
  const auto same_node = serve(kDisagg, two_with({}));
  const auto own_nodes = serve(kDisagg, two_with({"inference.disaggregation.decode.gpu=a100-80gb"}));
  const double nvlink_s = same_node["disaggregation"]["kv_transfer"]["seconds"]["mean"].get<double>();
  const double nic_s = own_nodes["disaggregation"]["kv_transfer"]["seconds"]["mean"].get<double>();
  INFO("mean KV transfer: " << nvlink_s << " s over NVLink, " << nic_s << " s across nodes");
  CHECK(nic_s > 3 * nvlink_s);  // 50 GB/s per NIC against NVLink's ~370 GB/s usable
}

TEST_CASE("a disaggregated run samples its links: the KV transfers' bytes cross each node's uplink once", "[unit]") {
  const auto out = std::filesystem::temp_directory_path() / "memtwin-disagg-links";
  std::filesystem::remove_all(out);
  const auto r = run_memtwin({"run", source_path(kDisagg), "--set", "inference.workload.requests=400", "--out", out.string()});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::ifstream in(out / "result.json");
  const auto result = nlohmann::json::parse(in);
  const double kv_bytes = result["disaggregation"]["kv_transfer"]["bytes_total"].get<double>();
  REQUIRE(kv_bytes > 0);
  // Prefill on node 0, decode on node 1: every transfer leaves by node 0's uplink and arrives by
  // node 1's, and nothing else crosses the fabric.
  std::map<std::string, double> bytes;
  double previous_time = 0;
  std::set<double> times;
  for (const auto& row : memtwin::test::read_link_utilization((out / "link_utilization.csv").string())) {
    CHECK(row.utilization >= 0);
    CHECK(row.utilization <= 1 + 1e-9);
    CHECK(row.time_s >= previous_time);
    previous_time = row.time_s;
    times.insert(previous_time);
    bytes[row.link + " " + row.direction] += row.bytes;
  }
  // SimGrid's link-load plugin integrates each link's load as read at the flows' starts and ends,
  // a piecewise approximation of the bytes: within 0.1% here (0.08% over on 2026-12-05).
  CHECK(bytes["node0.uplink up"] == Approx(kv_bytes).epsilon(1e-3));
  CHECK(bytes["node1.uplink down"] == Approx(kv_bytes).epsilon(1e-3));
  CHECK(bytes.count("node0.uplink down") == 0);
  CHECK(bytes.count("node1.uplink up") == 0);
  // Bounded however long the run: at most LinkMeter::kMaxIntervals intervals.
  CHECK(times.size() == result["disaggregation"]["links"]["intervals"].get<std::size_t>());
  CHECK(times.size() <= 256);
  CHECK(result["disaggregation"]["links"]["busiest"]["bytes"].get<double>() == Approx(kv_bytes).epsilon(1e-3));
  // Each request's transfer in requests.csv: its bytes add up to the total, and its first token
  // comes after its prefill's end and its transfer.
  std::ifstream requests(out / "requests.csv");
  std::string line;
  std::getline(requests, line);
  CHECK(line == "id,replica,arrival_s,prompt_tokens,output_tokens,first_token_s,finish_s,ttft_s,e2e_s,preemptions,swaps,"
                "prefilled_s,kv_transfer_bytes,kv_transfer_s");
  double request_bytes = 0;
  int rows = 0;
  while (std::getline(requests, line)) {
    std::vector<double> cells;
    std::stringstream row(line);
    for (std::string cell; std::getline(row, cell, ',');) cells.push_back(std::stod(cell));
    REQUIRE(cells.size() == 14);
    CHECK(cells[5] >= cells[11] + cells[13] - 1e-6);  // first token >= prefilled + transfer (9 digits written)
    request_bytes += cells[12];
    ++rows;
  }
  CHECK(rows == 400);
  CHECK(request_bytes == Approx(kv_bytes).epsilon(1e-6));
}

TEST_CASE("plan prices each side's GPUs at their own type's price", "[unit]") {
  const auto r = run_memtwin({"plan", source_path(kDisagg), "--set", "inference.workload.requests=100", "--search",
                              "inference.disaggregation.decode.gpu=h100-sxm,a100-80gb", "--minimize", "cost", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto plan = nlohmann::json::parse(r.out);
  CHECK(plan["winner"]["overrides"] == nlohmann::json::array({"inference.disaggregation.decode.gpu=a100-80gb"}));
  CHECK(plan["winner"]["cost_per_hour"].get<double>() == Approx(2 * 2.99 + 2 * 1.79));  // the catalog's prices
  REQUIRE(plan["runners_up"].size() == 1);
  CHECK(plan["runners_up"][0]["cost_per_hour"].get<double>() == Approx(4 * 2.99));
}

TEST_CASE("disaggregation is refused where it cannot run, naming the key", "[unit]") {
  const std::string file = source_path(kDisagg);
  const auto replicas = run_memtwin({"check", file, "--set", "inference.serving.replicas=2"});
  CHECK(replicas.exit_code == 2);
  CHECK_THAT(replicas.err, Catch::Contains("inference.serving.replicas") && Catch::Contains("per instance"));
  const auto gpus = run_memtwin({"check", file, "--set", "inference.disaggregation.decode.replicas=3"});
  CHECK(gpus.exit_code == 2);
  CHECK_THAT(gpus.err, Catch::Contains("need 5 GPUs; the cluster has 4"));
  const auto heads = run_memtwin({"check", file, "--set", "inference.disaggregation.decode.tensor_parallel=3"});
  CHECK(heads.exit_code == 2);
  CHECK_THAT(heads.err, Catch::Contains("inference.disaggregation.decode.tensor_parallel"));
  const auto unknown = run_memtwin({"check", file, "--set", "inference.disaggregation.decode.gpu=a100-80g"});
  CHECK(unknown.exit_code == 2);
  CHECK_THAT(unknown.err, Catch::Contains("inference.disaggregation.decode.gpu") && Catch::Contains("did you mean 'a100-80gb'"));
  // Two GPU types cannot share a node: three prefill GPUs fill node 0 and half of node 1.
  const auto split = run_memtwin({"check", file, "--set", "inference.disaggregation.decode.gpu=a100-80gb", "--set",
                                  "inference.disaggregation.prefill.replicas=3", "--set", "inference.disaggregation.decode.replicas=1"});
  CHECK(split.exit_code == 2);
  CHECK_THAT(split.err, Catch::Contains("need 5 GPUs (the sides' GPU types differ"));
  const auto calibrated = run_memtwin({"check", file, "--set", "inference.disaggregation.decode.gpu=a100-80gb", "--set",
                                       "cluster.calibration=" + source_path("tests/fuzz/seeds/calibration/measured.yaml")});
  CHECK(calibrated.exit_code == 2);
  CHECK_THAT(calibrated.err, Catch::Contains("a calibration describes cluster.gpu only"));
  const auto hw = run_memtwin({"run", file, "--backend", "hw"});
  CHECK(hw.exit_code == 2);
  CHECK_THAT(hw.err, Catch::Contains("simulated only"));
}
