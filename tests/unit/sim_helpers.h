#pragma once
// What the training-simulation tests share: the collective probe (a subprocess simulating only
// collectives), scenarios written to /tmp, and a run on the sim backend.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/test_support.h"

namespace memtwin::test {

inline double probe(const std::string& scenario, const std::string& kind, double bytes, int ranks, int concurrent = 1) {
  std::string cmd = std::string(MEMTWIN_COLLECTIVE_PROBE) + " " + scenario + " " + kind + " " + std::to_string(bytes) +
                    " " + std::to_string(ranks) + " " + std::to_string(concurrent);
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  double t = -1;
  REQUIRE(std::fscanf(p, "%lf", &t) == 1);
  REQUIRE(pclose(p) == 0);
  return t;
}

inline std::string write_scenario(const std::string& name, const std::string& text) {
  const std::string path = "/tmp/memtwin-test-" + name + ".yaml";
  std::ofstream(path) << text;
  return path;
}

inline const std::string kNode = R"(
name: sim-node
cluster: {nodes: 1, gpus_per_node: 8, gpu: h100-sxm, intra_node: {bandwidth: 400GB/s, latency: 3us}}
model: llama-2-7b
training: {micro_batch: 1, seq_len: 2048, global_batch: 8}
)";

inline nlohmann::json sim_run(const std::string& file, const std::vector<std::string>& sets = {}) {
  std::vector<std::string> args = {"run", file, "--backend", "sim", "--json"};
  for (const auto& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  auto r = run_memtwin(args);
  INFO(r.err);
  REQUIRE((r.exit_code == 0 || r.exit_code == 3));
  return nlohmann::json::parse(r.out);
}

}  // namespace memtwin::test
