// The collective cost model: NCCL's tuning model restated, the plain ring, nccl-tests calibration.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "models/comm/collective_model.h"
#include "models/comm/nccl_tests.h"
#include "models/scenario/scenario_error.h"
#include "models/scenario_loader.h"
#include "tests/test_support.h"

using namespace memtwin;
using test::run_memtwin;

namespace {

Scenario cluster_of(const std::string& cluster, const std::vector<std::string>& sets = {}) {
  const std::string text = "name: collectives\ncluster: " + cluster +
                           "\nmodel: llama-2-7b\ntraining: {micro_batch: 1, seq_len: 2048, global_batch: 6144}\n";
  return load_scenario_text(text, "collectives.yaml", "/tmp", sets).scenario;
}

// What nccl-tests 2.19 prints for a run whose times follow latency + bytes x factor / busbw exactly.
std::string synthetic_nccl_tests(const char* test, int ranks, int hosts, double latency_us, double busbw_gbps) {
  const double n = ranks;
  const double factor = std::string(test) == "all_reduce_perf" ? 2 * (n - 1) / n : (n - 1) / n;
  std::string out = "# nccl-tests version 2.19.6 nccl-headers=22803 nccl-library=22803\n# Collective test starting: " +
                    std::string(test) +
                    "\n# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 agg "
                    "iters: 1 validation: 1 graph: 0 unalign: 0\n#\n# Using devices\n";
  char line[512];
  for (int r = 0; r < ranks; ++r) {
    std::snprintf(line, sizeof line, "#  Rank %2d Group  0 Pid %6d on %10s device %2d [0000:%02x:00] NVIDIA A100-SXM4-80GB\n", r,
                  1000 + r, ("node" + std::to_string(r * hosts / ranks)).c_str(), r % (ranks / hosts), 0x07 + r);
    out += line;
  }
  out += "#\n#                                                              out-of-place                       in-place\n"
         "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n"
         "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)\n";
  for (double bytes = 8; bytes <= 1073741824; bytes *= 2) {
    const double us = latency_us + bytes * factor / (busbw_gbps * 1e3);
    const double algbw = bytes / us / 1e3;
    std::snprintf(line, sizeof line, "%12.0f  %12.0f     float     sum      -1  %7.2f  %6.2f  %6.2f       0  %7.2f  %6.2f  %6.2f       0\n",
                  bytes, bytes / 4, us, algbw, algbw * factor, us, algbw, algbw * factor);
    out += line;
  }
  out += "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 42.0\n#\n# Collective test concluded: " + std::string(test) + "\n";
  return out;
}

}  // namespace

TEST_CASE("NCCL's ring inside an A100 node: n-1 steps of its NVLink latency, NCCL's usable NVLink bandwidth", "[unit]") {
  const Scenario s = cluster_of("{nodes: 1, gpus_per_node: 8, gpu: a100-80gb, collectives: {algorithms: [ring], protocols: [simple]}}");
  const CollectiveCost c = CollectiveModel(s.cluster).cost(Collective::all_gather, {8, 1}, 1e9);
  CHECK(c.basis == "nccl ring/simple");
  // tuning.cc: base 8.4 us + 7 steps x 3.4 us; topo.h: 12 NVLinks x 20 GB/s usable of 300 GB/s.
  CHECK(c.latency.value() == Approx((8.4 + 7 * 3.4) * 1e-6));
  CHECK(c.transfer.value() == Approx(1e9 * 7.0 / 8 / 240e9));
}

TEST_CASE("NCCL's ring across 192 DGX A100 nodes pays 1,535 steps, 191 of them over the network", "[unit]") {
  const Scenario s = cluster_of(
      "{nodes: 192, gpus_per_node: 8, gpu: a100-80gb, inter_node: {nic_bandwidth: 200Gbps}, "
      "collectives: {algorithms: [ring], protocols: [simple]}}");
  const CollectiveCost c = CollectiveModel(s.cluster).cost(Collective::all_gather, {1536, 192}, 3.6e9);
  // Intra-node steps at max(3.4 us, 3 x the 1 us network post overhead), network steps at 14 us.
  CHECK(c.latency.value() == Approx((8.4 + 1344 * 3.4 + 191 * 14.0) * 1e-6));
  // 8 rails of 200 Gb/s at NCCL's 24 of 25 GB/s: 192 GB/s per node, below NVLink's 240.
  CHECK(c.transfer.value() == Approx(3.6e9 * 1535.0 / 1536 / 192e9));
}

TEST_CASE("NCCL picks its protocol and algorithm by message size, and NVLS where NVSwitch multicast exists", "[unit]") {
  const Scenario a100 = cluster_of("{nodes: 1, gpus_per_node: 8, gpu: a100-80gb}");
  const Scenario h100 = cluster_of("{nodes: 1, gpus_per_node: 8, gpu: h100-sxm}");
  const Scenario nodes = cluster_of("{nodes: 64, gpus_per_node: 8, gpu: h100-sxm}");
  const CollectiveModel ma(a100.cluster), mh(h100.cluster), mn(nodes.cluster);
  CHECK(ma.cost(Collective::all_reduce, {8, 1}, 4096).protocol == CollectiveProtocol::ll);
  CHECK(ma.cost(Collective::all_reduce, {8, 1}, 1e9).protocol == CollectiveProtocol::simple);
  CHECK(ma.cost(Collective::all_reduce, {8, 1}, 1e9).algorithm == CollectiveAlgorithm::ring);
  CHECK(mh.cost(Collective::all_reduce, {8, 1}, 1e9).algorithm == CollectiveAlgorithm::nvls);
  // Across many nodes a tree's log2 latency beats the ring's linear one on mid-size all-reduces.
  const CollectiveCost mid = mn.cost(Collective::all_reduce, {512, 64}, 4e6);
  INFO(mid.basis);
  CHECK(mid.algorithm != CollectiveAlgorithm::ring);
  // Every choice is never slower than the ring NCCL could also have run.
  const Scenario ring_only = cluster_of("{nodes: 64, gpus_per_node: 8, gpu: h100-sxm, collectives: {algorithms: [ring]}}");
  for (double bytes : {1e3, 1e5, 1e7, 1e9}) {
    CHECK(mn.cost(Collective::all_reduce, {512, 64}, bytes).time().value() <=
          CollectiveModel(ring_only.cluster).cost(Collective::all_reduce, {512, 64}, bytes).time().value());
  }
}

TEST_CASE("an all-gather of the same buffer over 4x the GPUs takes longer, not shorter", "[unit]") {
  // ZeRO-3 gathers a whole layer's parameters whatever the GPU count: the volume per GPU stays,
  // the ring's steps grow with the ranks.
  const Scenario s = cluster_of("{nodes: 192, gpus_per_node: 8, gpu: a100-80gb, inter_node: {nic_bandwidth: 200Gbps}}");
  const CollectiveModel m(s.cluster);
  const double at_384 = m.cost(Collective::all_gather, {384, 48}, 0.9e9).time().value();
  const double at_1536 = m.cost(Collective::all_gather, {1536, 192}, 0.9e9).time().value();
  CHECK(at_1536 > at_384);
}

TEST_CASE("nccl-tests output written from a known latency and bus bandwidth is fitted back to them", "[unit]") {
  for (const auto& [test, ranks, hosts] : std::vector<std::tuple<const char*, int, int>>{
           {"all_reduce_perf", 16, 2}, {"all_gather_perf", 8, 1}, {"reduce_scatter_perf", 32, 4}, {"alltoall_perf", 16, 2}}) {
    INFO(test);
    const NcclTestsRun run = parse_nccl_tests("/tmp/run.txt", synthetic_nccl_tests(test, ranks, hosts, 31.5, 182.0));
    CHECK(run.ranks == ranks);
    CHECK(run.nodes == hosts);
    CHECK(run.rows.size() == 28);
    const NcclTestsFit fit = fit_nccl_tests(run);
    CHECK(fit.measured.latency.value() == Approx(31.5e-6).epsilon(0.01));
    CHECK(fit.measured.bus_bandwidth.value() == Approx(182e9).epsilon(0.01));
    CHECK(fit.rms_relative_error < 0.01);
  }
}

TEST_CASE("a fitted collective replaces the model for its kind, scaled by ring steps for other group sizes", "[unit]") {
  const std::string calibration = "/tmp/memtwin-test-collectives-calibration.yaml";
  std::ofstream(calibration) << "collectives:\n  measured:\n"
                                "    - {collective: all_reduce, ranks: 16, nodes: 2, latency: 40us, bus_bandwidth: 150GB/s}\n";
  const Scenario s = cluster_of("{nodes: 4, gpus_per_node: 8, gpu: a100-80gb, calibration: " + calibration + "}");
  const CollectiveModel m(s.cluster);
  const double bytes = 1e8;
  const CollectiveCost same = m.cost(Collective::all_reduce, {16, 2}, bytes);
  CHECK_THAT(same.basis, Catch::StartsWith("measured"));
  CHECK(same.time().value() == Approx(40e-6 + bytes * 2 * 15.0 / 16 / 150e9));
  const CollectiveCost larger = m.cost(Collective::all_reduce, {32, 4}, bytes);
  CHECK(larger.latency.value() == Approx(40e-6 * 62 / 30));
  // Other kinds keep NCCL's model.
  CHECK_THAT(m.cost(Collective::all_gather, {16, 2}, bytes).basis, Catch::StartsWith("nccl"));
}

TEST_CASE("nccl-tests files memtwin cannot read are refused with their file and line", "[unit]") {
  const std::string good = synthetic_nccl_tests("all_reduce_perf", 8, 1, 20, 200);
  // Without the device list there is no group size.
  std::string no_ranks;
  for (std::size_t at = 0; at < good.size();) {
    const std::size_t end = good.find('\n', at);
    const std::string line = good.substr(at, end - at + 1);
    if (line.find("#  Rank") == std::string::npos) no_ranks += line;
    at = end + 1;
  }
  CHECK_THROWS_WITH(parse_nccl_tests("a.txt", no_ranks), Catch::Contains("Rank"));
  std::string garbled = good;
  garbled.replace(garbled.find("sum      -1") + 13, 6, "  oops");
  CHECK_THROWS_AS(parse_nccl_tests("a.txt", garbled), ScenarioError);
  CHECK_THROWS_WITH(parse_nccl_tests("a.txt", garbled), Catch::Contains("a.txt:"));
  std::string broadcast = good;
  broadcast.replace(broadcast.find("starting: all_reduce_perf"), 25, "starting: broadcast_perf");
  CHECK_THROWS_WITH(parse_nccl_tests("a.txt", broadcast), Catch::Contains("broadcast_perf"));
}

TEST_CASE("memtwin calibrate --nccl-tests writes a calibration file scenarios load", "[unit]") {
  const std::string run = "/tmp/memtwin-test-all_gather_perf.txt", out = "/tmp/memtwin-test-nccl-calibration.yaml";
  std::ofstream(run) << synthetic_nccl_tests("all_gather_perf", 16, 2, 45, 120);
  auto r = run_memtwin({"calibrate", "--nccl-tests", run, "--out", out});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("all_gather over 16 ranks on 2 node(s)"));
  const Scenario s = cluster_of("{nodes: 2, gpus_per_node: 8, gpu: a100-80gb, calibration: " + out + "}");
  REQUIRE(s.cluster.collectives.measured.size() == 1);
  CHECK(s.cluster.collectives.measured[0].bus_bandwidth.value() == Approx(120e9).epsilon(0.01));
  auto bad = run_memtwin({"calibrate", "--nccl-tests", "/tmp", "--out", out});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("/tmp"));
}

TEST_CASE("a leaf-spine fabric oversubscribes a group only when it spans more nodes than a leaf", "[unit]") {
  const std::string ring = "collectives: {algorithms: [ring], protocols: [simple]}";
  auto scenario = [&](const std::string& inter_node) {  // kept: a CollectiveModel refers to its cluster
    return cluster_of("{nodes: 8, gpus_per_node: 8, gpu: h100-sxm, " + ring + ", inter_node: " + inter_node + "}");
  };
  const Scenario with_spine = scenario("{topology: leaf-spine, nodes_per_leaf: 4, oversubscription: 2}");
  const Scenario non_blocking = scenario("{}"), with_fat_tree = scenario("{oversubscription: 2}");
  const CollectiveModel spine(with_spine.cluster), open(non_blocking.cluster), fat_tree(with_fat_tree.cluster);
  auto transfer = [](const CollectiveModel& m, int nodes) {
    return m.cost(Collective::all_reduce, {8 * nodes, nodes}, 4e9).transfer.value();
  };
  // Four nodes fit on a leaf, whose switch is non-blocking; eight cross the spine at half their
  // NICs' bandwidth, as fat-tree's oversubscribed node uplinks would take them.
  CHECK(transfer(spine, 4) == Approx(transfer(open, 4)));
  CHECK(transfer(spine, 8) == Approx(transfer(fat_tree, 8)));
  CHECK(transfer(spine, 8) > 1.5 * transfer(open, 8));
  // fat-tree oversubscribes every node's own uplink, whatever the group.
  CHECK(transfer(fat_tree, 4) > 1.5 * transfer(open, 4));
}
