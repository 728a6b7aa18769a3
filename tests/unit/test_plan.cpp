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
  std::vector<std::string> plan_args = {"plan", scenario, "--minimize", "step_time", "--require", "memory.gpu.fits",
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
  CHECK(answer["minimize"] == "time.step_s");
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

TEST_CASE("plan prices a GPU type as --price says, and rejects a price no candidate uses", "[unit]") {
  const std::string scenario = source_path("scenarios/planning/llama3-70b-serve-20rps.yaml");
  const std::vector<std::string> base = {"plan", scenario, "--minimize", "cost", "--search", "cluster.gpu=h100-sxm,h200",
                                         "--set", "inference.serving.replicas=2", "--backend", "analytic",
                                         "--require", "memory.gpu.fits", "--json"};
  auto catalog = run_memtwin(base);
  REQUIRE(catalog.exit_code == 0);
  const auto by_catalog = nlohmann::json::parse(catalog.out);
  // Two TP4 replicas: 8 GPUs at the catalog's price, H100 being the cheaper.
  CHECK(by_catalog["winner"]["overrides"][0] == "cluster.gpu=h100-sxm");
  auto args = base;
  args.insert(args.end(), {"--price", "h200=1.25"});
  auto priced = run_memtwin(args);
  REQUIRE(priced.exit_code == 0);
  const auto by_price = nlohmann::json::parse(priced.out);
  CHECK(by_price["winner"]["overrides"][0] == "cluster.gpu=h200");
  CHECK(by_price["winner"]["objective"].get<double>() == Approx(8 * 1.25));
  args = base;
  args.insert(args.end(), {"--price", "b200=1"});
  auto unused = run_memtwin(args);
  CHECK(unused.exit_code == 2);
  CHECK_THAT(unused.err, Catch::Contains("no candidate uses GPU b200"));
}

TEST_CASE("plan's rate search brackets the highest rate meeting the SLO, as a sweep over rate agrees", "[unit][heavy]") {
  const std::string scenario = source_path("scenarios/planning/llama3-70b-serve-20rps.yaml");
  const std::vector<std::string> common = {"--set", "inference.serving.replicas=2", "--set", "inference.workload.requests=600"};
  std::vector<std::string> args = {"plan", scenario, "--minimize", "cost", "--require", "latency_s.ttft.p99 <= 2",
                                   "--require", "latency_s.tpot.p99 <= 0.05", "--max-rate", "2/s..60/s", "-j", "2", "--json"};
  args.insert(args.end(), common.begin(), common.end());
  auto plan = run_memtwin(args);
  INFO(plan.err);
  REQUIRE(plan.exit_code == 0);
  const auto search = nlohmann::json::parse(plan.out)["max_rate"];
  REQUIRE(search["sustained_per_s"].is_number());
  REQUIRE(search["first_failing_per_s"].is_number());
  const double sustained = search["sustained_per_s"], failing = search["first_failing_per_s"];
  CHECK(failing > sustained);
  CHECK(failing / sustained <= 1.02 + 1e-9);
  // The sustained probe serves its offered load (by the last arrival plus one request's service:
  // over the whole makespan a 600-request run also counts the drain of its last requests).
  for (const auto& p : search["probes"]) {
    if (p["rate_per_s"].get<double>() == sustained) CHECK(p["served_requests_per_s"].get<double>() == Approx(sustained).epsilon(0.1));
  }

  // Brute force: every rate of a sweep below the answer meets the SLO, every rate above fails it.
  const std::string dir = "/tmp/memtwin-test-plan-rates";
  std::filesystem::remove_all(dir);
  std::vector<std::string> sweep = {"sweep", scenario, "--out", dir, "-j", "2",
                                    "--grid", "inference.workload.rate=4/s,10/s,16/s,30/s,50/s"};
  sweep.insert(sweep.end(), common.begin(), common.end());
  REQUIRE(run_memtwin(sweep).exit_code == 0);
  std::ifstream in(dir + "/points.jsonl");
  int below = 0, above = 0;
  for (std::string line; std::getline(in, line);) {
    const auto p = nlohmann::json::parse(line);
    REQUIRE(p["status"] == "ok");
    const auto& r = p["result"];
    const double rate = std::stod(p["overrides"][0].get<std::string>().substr(std::string("inference.workload.rate=").size()));
    const bool meets = r["latency_s"]["ttft"]["p99"].get<double>() <= 2 && r["latency_s"]["tpot"]["p99"].get<double>() <= 0.05 &&
                       r["load"]["sustainable"].get<bool>();
    INFO("rate " << rate << "/s");
    if (rate <= sustained) {
      CHECK(meets);
      ++below;
    }
    if (rate >= failing) {
      CHECK_FALSE(meets);
      ++above;
    }
  }
  CHECK(below >= 2);
  CHECK(above >= 2);
}

TEST_CASE("plan's rate search refuses a training scenario and a closed-loop workload", "[unit]") {
  auto training = run_memtwin({"plan", source_path("scenarios/quickstart.yaml"), "--max-rate", "1..10"});
  CHECK(training.exit_code == 2);
  CHECK_THAT(training.err, Catch::Contains("this one trains"));
  auto closed = run_memtwin({"plan", source_path("scenarios/planning/llama3-70b-serve-20rps.yaml"), "--max-rate", "1..10",
                             "--set", "inference.workload.arrival=closed_loop", "--set", "inference.workload.concurrency=8",
                             "--set", "inference.workload.rate=null"});
  CHECK(closed.exit_code == 2);
  CHECK_THAT(closed.err, Catch::Contains("closed-loop"));
}

TEST_CASE("plan's rate search without --require judges rates by the scenario's SLO, and says so", "[unit][heavy]") {
  const std::string scenario = source_path("scenarios/serving/llama3-8b-h100-fp16-kv.yaml");  // slo: ttft_p99 2 s, tpot_p99 50 ms
  auto search = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"plan", scenario, "--max-rate", "1..64", "--set", "inference.workload.requests=400", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = run_memtwin(args);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return nlohmann::json::parse(r.out)["max_rate"];
  };
  const auto by_slo = search({});
  CHECK(by_slo["judged_by"] == "inference.slo");
  CHECK(by_slo["requirements"] == nlohmann::json::array({"latency_s.ttft.p99 <= 2", "latency_s.tpot.p99 <= 0.05", "load.sustainable"}));
  // The same search as the SLO written out as --require.
  const auto by_require = search({"--require", "latency_s.ttft.p99 <= 2", "--require", "latency_s.tpot.p99 <= 0.05"});
  CHECK(by_require["judged_by"] == "--require");
  CHECK(by_slo["sustained_per_s"] == by_require["sustained_per_s"]);
  // A tighter SLO lowers the answer; no SLO and no --require leaves sustainability alone, named.
  const auto tight = search({"--set", "inference.slo.ttft_p99=100ms"});
  CHECK(tight["sustained_per_s"].get<double>() < by_slo["sustained_per_s"].get<double>());
  const auto none = search({"--set", "inference.slo=null"});
  CHECK_THAT(none["judged_by"].get<std::string>(), Catch::Contains("sustainability alone"));
  CHECK(none["requirements"] == nlohmann::json::array({"load.sustainable"}));
  CHECK(none["sustained_per_s"].get<double>() >= by_slo["sustained_per_s"].get<double>());
}

TEST_CASE("plan's rate search with --attainment finds DistServe's goodput: the highest rate at which that fraction meets the SLO",
          "[unit][heavy]") {
  const std::string scenario = source_path("scenarios/serving/llama3-8b-h100-fp16-kv.yaml");
  auto plan = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"plan", scenario, "--set", "inference.workload.requests=400", "--set", "inference.slo.ttft_p99=1s",
                                     "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_memtwin(args);
  };
  auto search = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), {"--max-rate", "1..64"});
    const auto r = plan(extra);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return nlohmann::json::parse(r.out)["max_rate"];
  };
  const auto p99 = search({}), ninety = search({"--attainment", "0.9"}), all = search({"--attainment", "1"});
  CHECK(ninety["judged_by"] == "goodput");
  CHECK(ninety["requirements"] == nlohmann::json::array({"goodput.fraction_meeting_slo >= 0.9", "load.sustainable"}));
  // A rate whose p99 TTFT and TPOT are within their limits has at least 98% of requests meeting
  // both, so 90% attainment holds there too: the goodput is at least the p99 answer, and asking
  // for every request lowers it.
  CHECK(ninety["sustained_per_s"].get<double>() >= p99["sustained_per_s"].get<double>());
  CHECK(all["sustained_per_s"].get<double>() <= ninety["sustained_per_s"].get<double>());
  // Per GPU (one here) and per dollar at the catalog's H100 price.
  CHECK(ninety["sustained_per_gpu"].get<double>() == Approx(ninety["sustained_per_s"].get<double>()));
  CHECK(ninety["requests_per_usd"].get<double>() > 0);
  // Refused: without a rate search, outside (0, 1], without an SLO to attain.
  CHECK(plan({"--search", "inference.serving.max_num_seqs=128,256", "--attainment", "0.9"}).exit_code == 2);
  CHECK(plan({"--max-rate", "1..64", "--attainment", "1.5"}).exit_code == 2);
  const auto no_slo = plan({"--max-rate", "1..64", "--attainment", "0.9", "--set", "inference.slo=null"});
  CHECK(no_slo.exit_code == 2);
  CHECK_THAT(no_slo.err, Catch::Contains("inference.slo"));
}

TEST_CASE("plan --maximize ranks every candidate by its own rate search, per GPU or per dollar", "[unit][heavy]") {
  const std::string scenario = source_path("scenarios/serving/llama3-8b-disagg-2p2d-h100.yaml");
  auto plan = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"plan", scenario, "--set", "inference.workload.requests=300", "--search",
                                     "inference.disaggregation.prefill.replicas=1,2", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_memtwin(args);
  };
  const auto r = plan({"--maximize", "goodput_per_gpu", "--max-rate", "1..64"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  CHECK(doc["maximize"] == "goodput_per_gpu");
  // Each candidate's objective is its own sustained rate over its GPUs; the winner's is the largest.
  std::vector<nlohmann::json> ranked = {doc["winner"]};
  for (const auto& e : doc["runners_up"]) ranked.push_back(e);
  REQUIRE(ranked.size() == 2);
  for (const auto& e : ranked) {
    CHECK(e["objective"].get<double>() == Approx(e["sustained_per_s"].get<double>() / e["gpus"].get<double>()));
  }
  CHECK(ranked[0]["objective"].get<double>() >= ranked[1]["objective"].get<double>());
  // The winner's rate search is the one reported (not searched again).
  CHECK(doc["max_rate"]["sustained_per_s"] == doc["winner"]["sustained_per_s"]);
  // The same ranked by requests per dollar: rate x 3600 / the hourly cost.
  const auto usd = plan({"--maximize", "goodput_per_usd", "--max-rate", "1..64"});
  REQUIRE(usd.exit_code == 0);
  const auto by_usd = nlohmann::json::parse(usd.out)["winner"];
  CHECK(by_usd["objective"].get<double>() ==
        Approx(by_usd["sustained_per_s"].get<double>() * 3600 / by_usd["cost_per_hour"].get<double>()));
  // Refused: without --max-rate, with --minimize too, an unknown objective.
  CHECK(plan({"--maximize", "goodput_per_gpu"}).exit_code == 2);
  CHECK(plan({"--maximize", "goodput_per_gpu", "--max-rate", "1..64", "--minimize", "gpus"}).exit_code == 2);
  const auto unknown = plan({"--maximize", "throughput", "--max-rate", "1..64"});
  CHECK(unknown.exit_code == 2);
  CHECK_THAT(unknown.err, Catch::Contains("goodput_per_gpu or goodput_per_usd"));
}
