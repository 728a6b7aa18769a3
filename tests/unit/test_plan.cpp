// memtwin plan against a brute-force sweep of the same space.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "tests/test_support.h"

using memtwin::test::run_memtwin;
using memtwin::test::source_path;

TEST_CASE("plan on a small space picks what a brute-force sweep of it picks", "[unit]") {
  const std::string scenario = source_path("scenarios/quickstart.yaml");
  const std::vector<std::string> space = {"training.micro_batch=1,2,4", "cluster.nodes=1,2"};
  // Minimise the step time among configurations that fit and reach 45% MFU.
  std::vector<std::string> plan_args = {"plan", scenario, "--minimize", "time.step_s", "--require", "memory.gpu.fits",
                                        "--require", "time.mfu >= 0.45", "--json", "-j", "2",
                                        "--set", "training.global_batch=32", "--set", "training.seq_len=4096"};
  for (const auto& s : space) plan_args.insert(plan_args.end(), {"--search", s});
  auto plan = run_memtwin(plan_args);
  INFO(plan.err);
  REQUIRE(plan.exit_code == 0);
  const auto answer = nlohmann::json::parse(plan.out);

  const std::string dir = "/tmp/memtwin-test-plan-sweep";
  std::filesystem::remove_all(dir);
  std::vector<std::string> sweep_args = {"sweep", scenario, "--out", dir, "-j", "2", "--set", "training.global_batch=32",
                                         "--set", "training.seq_len=4096"};
  for (const auto& s : space) sweep_args.insert(sweep_args.end(), {"--grid", s});
  REQUIRE(run_memtwin(sweep_args).exit_code == 0);
  std::ifstream in(dir + "/points.jsonl");
  double best = std::numeric_limits<double>::infinity();
  nlohmann::json best_overrides;
  for (std::string line; std::getline(in, line);) {
    const auto p = nlohmann::json::parse(line);
    if (p["status"] != "ok") continue;
    const auto& r = p["result"];
    if (!r["memory"]["gpu"]["fits"].get<bool>() || r["time"]["mfu"].get<double>() < 0.45) continue;
    const double step = r["time"]["step_s"];
    if (step < best) {
      best = step;
      best_overrides = p["overrides"];
    }
  }
  REQUIRE(std::isfinite(best));
  CHECK(answer["winner"]["objective"].get<double>() == Approx(best));
  CHECK(answer["winner"]["overrides"] == best_overrides);
}

TEST_CASE("plan says when nothing is feasible and why the cheaper options failed", "[unit]") {
  auto r = run_memtwin({"plan", source_path("scenarios/training/llama2-70b-fsdp-64xh100.yaml"), "--minimize", "gpus",
                        "--search", "cluster.nodes=1,2", "--search", "cluster.gpu=a100-40gb", "--backend", "analytic",
                        "--require", "memory.gpu.fits"});
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.out, Catch::Contains("no candidate meets the requirements"));
  CHECK_THAT(r.out, Catch::Contains("does not fit in memory") || Catch::Contains("invalid"));
}
