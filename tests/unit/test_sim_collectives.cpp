// Collectives and framework communication in the training simulator, held to the collective
// model (models/comm/collective_model.h) and to the frameworks' knobs.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "models/comm/collective_model.h"
#include "models/scenario_loader.h"
#include "models/serving/iteration_cost.h"
#include "tests/unit/sim_helpers.h"

using namespace memtwin;
using test::kNode;
using test::probe;
using test::run_memtwin;
using test::sim_run;
using test::write_scenario;

TEST_CASE("a collective on idle links takes the collective model's time, whichever algorithm NCCL picks", "[unit]") {
  // One node of H100s (NVLS available), one of A100s, a host-device ring, and 2 and 4 nodes of
  // A100s (rings across rails; trees and the ring's plateau for all-reduce).
  const std::string h100 = write_scenario("idle-h100", kNode);
  const std::string a100 = write_scenario("idle-a100", R"(
name: idle-a100
cluster: {nodes: 1, gpus_per_node: 8, gpu: a100-80gb}
model: llama-2-7b
training: {micro_batch: 1, seq_len: 2048, global_batch: 8}
)");
  const std::string ring = write_scenario("idle-ring", R"(
name: idle-ring
cluster: {nodes: 1, gpus_per_node: 8, gpu: a100-80gb, collectives: {library: ring}, intra_node: {latency: 3us}}
model: llama-2-7b
training: {micro_batch: 1, seq_len: 2048, global_batch: 8}
)");
  const std::string nodes4 = write_scenario("idle-4nodes", R"(
name: idle-4nodes
cluster: {nodes: 4, gpus_per_node: 8, gpu: a100-80gb, inter_node: {nic_bandwidth: 200Gbps}}
model: llama-2-7b
training: {micro_batch: 1, seq_len: 2048, global_batch: 32}
)");
  std::set<std::string> algorithms;
  for (const auto& [file, max_ranks] : std::vector<std::pair<std::string, int>>{{h100, 8}, {a100, 8}, {ring, 8}, {nodes4, 32}}) {
    const Scenario s = load_scenario_file(file).scenario;
    const CollectiveModel model(s.cluster);
    for (int n : {2, 8, 16, 32}) {
      if (n > max_ranks) continue;
      const int nodes = std::max(1, n / s.cluster.gpus_per_node);
      for (const char* kind : {"all_reduce", "all_gather", "reduce_scatter"}) {
        for (double bytes : {64e3, 1e6, 256e6}) {
          INFO(file << " n=" << n << " " << kind << " bytes=" << bytes);
          const CollectiveCost cost = model.cost(*parse_collective(kind), {n, nodes}, bytes);
          algorithms.insert(cost.basis);
          INFO(cost.basis);
          CHECK(probe(file, kind, bytes, n) == Approx(cost.time().value()).epsilon(1e-6));
        }
      }
    }
  }
  // The cases above exercise several of NCCL's choices, and the plain ring.
  CHECK(algorithms.count("nccl nvls/simple") == 1);
  CHECK(algorithms.count("nccl tree/simple") + algorithms.count("nccl tree/ll128") + algorithms.count("nccl tree/ll") >= 1);
  CHECK(algorithms.count("nccl ring/simple") == 1);
  CHECK(algorithms.count("ring") == 1);
  CHECK(algorithms.size() >= 5);
}

TEST_CASE("the analytic backend, the simulator on idle links and serving's tensor parallelism time a collective alike", "[unit]") {
  // One all-reduce of a 2,048-token activation over 8 H100s (NVLS): Llama-2-7B with tensor
  // parallelism 8 trained (its plan's all-reduces), simulated alone, and served (its TP cost).
  const std::string training = write_scenario("same-training", R"(
name: same-training
cluster: {nodes: 1, gpus_per_node: 8, gpu: h100-sxm}
model: llama-2-7b
training: {micro_batch: 1, seq_len: 2048, global_batch: 2, parallelism: {tensor: 8}}
)");
  const std::string serving = write_scenario("same-serving", R"(
name: same-serving
cluster: {nodes: 1, gpus_per_node: 8, gpu: h100-sxm}
model: llama-2-7b
inference: {serving: {tensor_parallel: 8}, workload: {rate: 1/s, requests: 10, prompt_tokens: 2048, output_tokens: 8}}
)");
  const Scenario s = load_scenario_file(training).scenario;
  const double bytes = 2048.0 * s.model.hidden * 2;
  const double model = CollectiveModel(s.cluster).cost(Collective::all_reduce, {8, 1}, bytes).time().value();

  auto analytic = run_memtwin({"run", training, "--backend", "analytic", "--json"});
  REQUIRE(analytic.exit_code == 0);
  const auto doc = nlohmann::json::parse(analytic.out);
  const double calls = doc["communication"]["calls"]["all_reduce"];
  REQUIRE(calls > 0);
  CHECK(doc["communication"]["time_s"]["all_reduce"].get<double>() / calls == Approx(model).epsilon(1e-9));
  // The simulated step's communication stream is busy exactly that long (one group, no contention).
  CHECK(sim_run(training)["time"]["comm_busy_s"].get<double>() == Approx(calls * model).epsilon(1e-6));

  CHECK(probe(training, "all_reduce", bytes, 8) == Approx(model).epsilon(1e-6));

  const IterationModel served(load_scenario_file(serving).scenario);
  IterationLoad load;
  load.prefill_tokens = 2048;
  CHECK((served.seconds(load) - served.compute_seconds(load)) / served.tp_all_reduces() == Approx(model).epsilon(1e-9));
}

TEST_CASE("the plain ring library is the alpha-beta closed form", "[unit]") {
  const std::string file = write_scenario("alpha-beta", R"(
name: alpha-beta
cluster: {nodes: 1, gpus_per_node: 8, gpu: h100-sxm, collectives: {library: ring}, intra_node: {bandwidth: 400GB/s, latency: 3us}}
model: llama-2-7b
training: {micro_batch: 1, seq_len: 2048, global_batch: 8}
)");
  const double alpha = 3e-6, bw = 400e9;
  for (int n : {2, 4, 8}) {
    for (double bytes : {1e6, 256e6}) {
      INFO("n=" << n << " bytes=" << bytes);
      CHECK(probe(file, "all_reduce", bytes, n) == Approx(2 * (n - 1) * alpha + 2.0 * (n - 1) / n * bytes / bw).epsilon(1e-6));
      CHECK(probe(file, "all_gather", bytes, n) == Approx((n - 1) * alpha + (n - 1.0) / n * bytes / bw).epsilon(1e-6));
    }
  }
}

TEST_CASE("DeepSpeed ZeRO-3 prefetches what stage3_max_live_parameters allows, not FSDP's depth", "[unit]") {
  const std::string file = write_scenario("deepspeed-live", R"(
name: deepspeed-live
cluster: {nodes: 1, gpus_per_node: 8, gpu: h100-sxm}
model: llama-2-7b
training: {framework: deepspeed, micro_batch: 1, seq_len: 2048, global_batch: 16, sharding: {strategy: zero, stage: 3}}
)");
  // Llama-2-7B's blocks hold 202M parameters: the default 1e9 live parameters let the next block's
  // gather run under this block's compute; 3e8 cannot hold two blocks, so each gather waits for the
  // previous block's release and none of it hides.
  const auto ahead = sim_run(file);
  const auto serial = sim_run(file, {"training.sharding.max_live_parameters=3e8"});
  CHECK(ahead["time"]["exposed_comm_s"].get<double>() < 0.9 * ahead["time"]["comm_busy_s"].get<double>());
  CHECK(serial["time"]["exposed_comm_s"].get<double>() == Approx(serial["time"]["comm_busy_s"].get<double>()).epsilon(1e-6));
  CHECK(serial["time"]["step_s"].get<double>() > ahead["time"]["step_s"].get<double>());
  CHECK(serial["memory"]["gpu"]["peak_bytes"].get<double>() < ahead["memory"]["gpu"]["peak_bytes"].get<double>());
}

namespace {

// What sim/lone_collectives.h answers on the scenario's platform to the probe's commands.
std::vector<std::string> lone_answers(const std::string& scenario, const std::string& commands) {
  const std::string input = "/tmp/memtwin-test-lone-commands.txt";
  std::ofstream(input) << commands;
  FILE* p = popen((std::string(MEMTWIN_LONE_PROBE) + " " + scenario + " < " + input).c_str(), "r");
  REQUIRE(p != nullptr);
  std::vector<std::string> answers;
  char line[64];
  while (std::fgets(line, sizeof line, p)) answers.emplace_back(std::string(line).substr(0, std::string(line).find('\n')));
  REQUIRE(pclose(p) == 0);
  return answers;
}

}  // namespace

TEST_CASE("a collective alone on its links runs one flow of each shape and shared links or streams keep every flow", "[unit]") {
  // Two nodes of 4 GPUs: slots 0-3 and 4-7. Communicator 0 is a ring inside node 0 (NVLink only).
  const std::string file = write_scenario("lone", R"(
name: lone
cluster: {nodes: 2, gpus_per_node: 4, gpu: h100-sxm}
model: llama-2-7b
training: {micro_batch: 1, seq_len: 2048, global_batch: 8}
)");
  const std::string ring = "add 0 g0 g1\nadd 0 g1 g2\nadd 0 g2 g3\nadd 0 g3 g0\n";
  const std::string ask_ring = "ask 0 0>1:1e6 1>2:1e6 2>3:1e6 3>0:1e6\n";
  // Alone: one flow stands for the ring. Copies to and from the host cross PCIe, not NVLink, and
  // a ring across nodes on the same rail crosses NICs and uplinks: neither touches the ring's links.
  CHECK(lone_answers(file, ring + "add -1 g0 c0\nadd -1 c0 g0\nadd 1 g0 g4\nadd 1 g4 g0\n" + ask_ring) ==
        std::vector<std::string>{"flows 0"});
  // Another communicator's flow over one of the ring's NVLink directions: every flow runs.
  CHECK(lone_answers(file, ring + "add 2 g1 g2\n" + ask_ring) == std::vector<std::string>{"all"});
  // Its collectives on two streams could be in flight together: every flow runs.
  CHECK(lone_answers(file, ring + "streams 0\n" + ask_ring) == std::vector<std::string>{"all"});
  // Flows of unequal bytes, or with none, a link direction two flows share (one component of two,
  // nothing alike beside it), a route never added: every flow runs.
  CHECK(lone_answers(file, ring + "ask 0 0>1:1e6 1>2:2e6\nask 0 0>1:0 1>2:0\nask 0 0>1:1e6 0>1:1e6\nask 0 0>1:1e6 1>0:1e6\n") ==
        std::vector<std::string>{"all", "all", "all", "all"});
  // Across nodes: two rails' rings share the nodes' uplinks, so neither is alone; one rail's ring is
  // (its two directions are alike); NVLink and NIC hops are not alike.
  CHECK(lone_answers(file, "add 1 g0 g4\nadd 1 g4 g0\nadd 2 g1 g5\nadd 2 g5 g1\nask 1 0>4:1e6 4>0:1e6\n") ==
        std::vector<std::string>{"all"});
  CHECK(lone_answers(file, "add 1 g0 g4\nadd 1 g4 g0\nask 1 0>4:1e6 4>0:1e6\n") == std::vector<std::string>{"flows 0"});
  CHECK(lone_answers(file, "add 3 g4 g5\nadd 3 g0 g4\nask 3 4>5:1e6 0>4:1e6\n") == std::vector<std::string>{"all"});
  // A rail-aligned ring over both nodes (sim/collectives.cpp's order: each GPU's NIC flow, then its
  // NVLink flow): each node's four NIC flows share its uplink and form one component, the other
  // node's its twin; the NVLink flows are eight alike. Node 0's NIC flows and one NVLink flow stand
  // for all sixteen. With unequal bytes in a component it runs whole (and so does its twin).
  std::string rail, asked, mixed;
  for (int a = 0; a < 2; ++a) {
    for (int j = 0; j < 4; ++j) {
      const int here = 4 * a + j, across = 4 * (1 - a) + j, beside = 4 * a + (j + 1) % 4;
      rail += "add 4 g" + std::to_string(here) + " g" + std::to_string(across) + "\nadd 4 g" + std::to_string(here) + " g" +
              std::to_string(beside) + "\n";
      asked += " " + std::to_string(here) + ">" + std::to_string(across) + ":1e6 " + std::to_string(here) + ">" +
               std::to_string(beside) + ":3e6";
      mixed += " " + std::to_string(here) + ">" + std::to_string(across) + (j == 0 ? ":2e6 " : ":1e6 ") + std::to_string(here) +
               ">" + std::to_string(beside) + ":3e6";
    }
  }
  CHECK(lone_answers(file, rail + "ask 4" + asked + "\nask 4" + mixed + "\n") ==
        std::vector<std::string>{"flows 0 1 2 4 6", "flows 0 1 2 4 6 8 10 12 14"});
}

TEST_CASE("merging lone collectives leaves every result as running every flow gives it, byte for byte", "[unit][heavy]") {
  // Tensor 4 fills each node, so its rings cross only NVLink (merged); data parallelism and the
  // pipeline cross NICs. With tensor 2 a node holds two data-parallel ranks, whose rings share
  // NVLink with the tensor-parallel ones (nothing merged). Optimizer offload adds PCIe copies.
  const std::string merged = write_scenario("merge-lone", R"(
name: merge-lone
cluster: {nodes: 6, gpus_per_node: 4, gpu: h100-sxm}
model: llama-2-7b
training: {micro_batch: 1, seq_len: 2048, global_batch: 24, parallelism: {tensor: 4, pipeline: 2}}
)");
  const std::string shared = write_scenario("merge-shared", R"(
name: merge-shared
cluster: {nodes: 2, gpus_per_node: 4, gpu: h100-sxm}
model: llama-2-7b
training: {micro_batch: 1, seq_len: 2048, global_batch: 8, parallelism: {tensor: 2}, sharding: {strategy: zero, stage: 2},
           offload: {optimizer: cpu}}
)");
  for (const auto& [file, fidelity, merges] : {std::tuple{merged, "full", true}, std::tuple{merged, "fast", true},
                                                std::tuple{shared, "full", false}}) {
    INFO(file << " at " << fidelity << " fidelity");
    const std::vector<std::string> args = {"run", file, "--backend", "sim", "--json", "--set", std::string("simulation.fidelity=") + fidelity};
    auto every = args;
    every.push_back("--every-flow");
    const auto one = run_memtwin(args);
    const auto all = run_memtwin(every);
    INFO(one.err << all.err);
    REQUIRE(one.exit_code == 0);
    REQUIRE(all.exit_code == 0);
    CHECK(one.out == all.out);
    CHECK(nlohmann::json::parse(one.out)["simulated"]["flows"].get<long>() > 0);
    // Whether some flows stood for others: the pre-check's refusal counts the flows SimGrid runs.
    auto refused = args;
    refused.insert(refused.end(), {"--set", "simulation.time_limit=1us"});
    auto refused_every = refused;
    refused_every.push_back("--every-flow");
    const auto estimate = run_memtwin(refused), estimate_every = run_memtwin(refused_every);
    CHECK(estimate.exit_code == 2);
    CHECK(estimate_every.exit_code == 2);
    CHECK((estimate.err.find("standing for the rest") != std::string::npos) == merges);
    CHECK(estimate_every.err.find("standing for the rest") == std::string::npos);
  }
}

TEST_CASE("a group over nodes holding unequal shares of it runs as one ring in the collective model's time", "[unit]") {
  // Six ranks over nodes of four (a hybrid-shard group of 6): no rails to align, one ring through
  // all six; on idle links it takes the model's time, and a step with such groups simulates.
  const std::string file = write_scenario("uneven-ring", R"(
name: uneven-ring
cluster: {nodes: 3, gpus_per_node: 4, gpu: h100-sxm, inter_node: {nics_per_node: 1}}
model: {preset: llama-2-7b, layers: 4}
training: {micro_batch: 1, seq_len: 2048, global_batch: 24, sharding: {strategy: fsdp, mode: hybrid_shard, shard_group: 6}}
)");
  const Scenario s = load_scenario_file(file).scenario;
  for (const char* kind : {"all_gather", "reduce_scatter", "all_reduce"}) {
    INFO(kind);
    const CollectiveCost cost = CollectiveModel(s.cluster).cost(*parse_collective(kind), {6, 2}, 64e6);
    CHECK(probe(file, kind, 64e6, 6) == Approx(cost.time().value()).epsilon(1e-6));
  }
  const auto step = sim_run(file, {"simulation.fidelity=full"});
  CHECK(step["time"]["step_s"].get<double>() > 0);
  CHECK(step["simulated"]["simulated_ranks"] == 12);
}
