#pragma once
// What the serving-simulation tests share: the baseline scenario and a run of it on the sim backend.
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/test_support.h"

namespace memtwin::test {

inline const std::string kFp16 = "scenarios/serving/llama3-8b-h100-fp16-kv.yaml";

inline nlohmann::json serve(const std::string& file, const std::vector<std::string>& sets, const std::string& out_dir = "") {
  std::vector<std::string> args = {"run", source_path(file), "--backend", "sim", "--json"};
  if (!out_dir.empty()) {
    args.push_back("--out");
    args.push_back(out_dir);
  }
  for (const auto& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  auto r = run_memtwin(args);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.out);
}

}  // namespace memtwin::test
