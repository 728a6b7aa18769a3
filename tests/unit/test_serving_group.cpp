// A serving run executed by several processes (the host engine's expert-parallel ranks): the
// router every rank applies alike, the shares rank 0 merges, and the run itself on two ranks.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/serving/router.h"
#include "models/serving/serving_run_merge.h"
#include "tests/test_support.h"

using namespace memtwin;
using test::run_memtwin;
using test::source_path;
namespace fs = std::filesystem;

TEST_CASE("the replica router: round robin in turn, the least loaded first, ties to the lowest index", "[unit]") {
  std::vector<std::size_t> outstanding = {3, 1, 1};
  std::vector<std::int64_t> used = {5, 9, 2};
  auto out = [&](std::size_t i) { return outstanding[i]; };
  auto kv = [&](std::size_t i) { return used[i]; };
  ReplicaRouter turns(Router::round_robin, 3);
  CHECK(turns.pick(out, kv) == 0);
  CHECK(turns.pick(out, kv) == 1);
  CHECK(turns.pick(out, kv) == 2);
  CHECK(turns.pick(out, kv) == 0);
  ReplicaRouter fewest(Router::least_outstanding, 3);
  CHECK(fewest.pick(out, kv) == 1);
  ReplicaRouter least_kv(Router::least_kv, 3);
  CHECK(least_kv.pick(out, kv) == 2);
}

TEST_CASE("a replica's share of a serving run merges into another's: its records, counters, peaks, gaps and ops", "[unit]") {
  auto run_of = [](int replica) {
    ServingRun r;
    r.requests.resize(4);
    for (std::size_t i = 0; i < 4; ++i) {
      r.requests[i].id = static_cast<std::int64_t>(i);
      r.requests[i].arrival_s = 0.1 * static_cast<double>(i);
    }
    // Replica 0 served requests 0 and 2, replica 1 requests 1 and 3.
    for (std::size_t i = static_cast<std::size_t>(replica); i < 4; i += 2) {
      r.requests[i].replica = replica;
      r.requests[i].first_token_s = 1.0 + static_cast<double>(i);
      r.requests[i].finish_s = 2.0 + static_cast<double>(i);
      r.requests[i].preemptions = replica;
    }
    r.iterations = 10 + replica;
    r.preemptions = replica;
    r.peak_blocks_used = 100 - 50 * replica;
    r.makespan_s = 5.0 + replica;
    r.swap_bytes = 1e6 * replica;
    r.inter_token_s.add(0.01f + 0.01f * static_cast<float>(replica));
    r.inter_token_s.add(0.01f + 0.01f * static_cast<float>(replica));
    r.iteration_log.push_back({replica, 0.0, 0.5, 1, 2});
    r.op_seconds[IterationOp::weight_gemm] = 1.0;
    r.op_seconds[IterationOp::collective] = 0.25 * (replica + 1);
    r.executed_ops = {"weight_gemm 512x1536", replica ? "decode_attention fp16" : "prefill_attention"};
    return r;
  };
  ServingRun first = run_of(0);
  const ServingRun second = run_of(1);
  merge_replica_share(first, replica_share(second, 1));
  for (std::size_t i = 0; i < 4; ++i) {
    INFO(i);
    CHECK(first.requests[i].replica == static_cast<int>(i % 2));
    CHECK(first.requests[i].finish_s == 2.0 + static_cast<double>(i));
    CHECK(first.requests[i].preemptions == static_cast<int>(i % 2));
  }
  CHECK(first.iterations == 21);
  CHECK(first.preemptions == 1);
  CHECK(first.peak_blocks_used == 100);
  CHECK(first.makespan_s == 6.0);
  CHECK(first.swap_bytes == 1e6);
  CHECK(first.inter_token_s.size() == 4);
  CHECK(first.iteration_log.size() == 2);
  CHECK(first.iteration_log.back().replica == 1);
  CHECK(first.op_seconds[IterationOp::weight_gemm] == 2.0);
  CHECK(first.op_seconds[IterationOp::collective] == 0.75);
  CHECK(first.executed_ops == std::set<std::string>{"weight_gemm 512x1536", "decode_attention fp16", "prefill_attention"});
  // A share of another request stream is refused.
  ServingRun other;
  other.requests.resize(3);
  CHECK_THROWS_AS(merge_replica_share(other, replica_share(second, 1)), std::invalid_argument);
}

TEST_CASE("an expert-parallel MoE model serves on two host ranks: the simulator's plan, both replicas used, the token exchange timed",
          "[unit]") {
  const fs::path out = fs::temp_directory_path() / "memtwin-validate-ep2";
  fs::remove_all(out);
  const auto r = run_memtwin({"validate", source_path("scenarios/host/serve-moe-ep2.yaml"), "--set", "inference.workload.requests=12",
                              "--out", out.string()});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto read = [](const fs::path& p) { return nlohmann::json::parse(std::ifstream(p)); };
  const auto validation = read(out / "validation.json");
  CHECK(validation["ranks"] == 2);
  CHECK(validation["predicted_plan_hash"] == validation["measured_plan_hash"]);
  const auto measured = read(out / "measured" / "result.json");
  CHECK(measured["requests"]["completed"] == 12);
  CHECK(measured["executed"]["replicas"] == 2);
  const auto& ops = measured["executed"]["iteration_ops"];
  CHECK(std::find(ops.begin(), ops.end(), "collective all_gather expert_parallel") != ops.end());
  CHECK(std::find(ops.begin(), ops.end(), "collective reduce_scatter expert_parallel") != ops.end());
  CHECK(measured["op_time_s"]["collective"].get<double>() > 0);
  const auto predicted = read(out / "predicted" / "result.json");
  CHECK(predicted["op_time_s"]["collective"].get<double>() > 0);
  // Each rank holds half of every layer's experts: the weights the memory model counts, allocated.
  CHECK(measured["memory"]["gpu"]["weights_bytes"] == predicted["memory"]["gpu"]["weights_bytes"]);
  // Both replicas served requests (least_outstanding routing on the ranks' shared state).
  std::ifstream csv(out / "measured" / "requests.csv");
  std::string line;
  std::getline(csv, line);
  std::set<std::string> replicas;
  while (std::getline(csv, line)) replicas.insert(line.substr(line.find(',') + 1, 1));
  CHECK(replicas == std::set<std::string>{"0", "1"});
  fs::remove_all(out);
}
