// memtwin report renders every expected figure, non-empty, for training, serving, sweeps and plans.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/test_support.h"

using memtwin::test::run_memtwin;
using memtwin::test::source_path;

namespace {

// The figure ids in the HTML whose embedded PNG is a real, non-trivial image.
std::vector<std::string> figures_in(const std::string& html_path) {
  std::ifstream in(html_path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string html = ss.str();
  std::vector<std::string> ids;
  for (std::size_t pos = html.find("<figure id='"); pos != std::string::npos; pos = html.find("<figure id='", pos + 1)) {
    const std::size_t start = pos + 12, end = html.find('\'', start);
    const std::size_t data = html.find("base64,", end), close = html.find('\'', data);
    // PNG files start with \x89PNG, "iVBORw0KGgo" in base64; a real figure is several kB.
    if (html.compare(data + 7, 11, "iVBORw0KGgo") == 0 && close - data > 4000) ids.push_back(html.substr(start, end - start));
  }
  return ids;
}

}  // namespace

TEST_CASE("reports carry every expected figure for training, serving, sweeps and plans", "[unit][heavy]") {
  const std::string train = "/tmp/memtwin-test-report-train", serve = "/tmp/memtwin-test-report-serve";
  REQUIRE(run_memtwin({"run", source_path("scenarios/quickstart.yaml"), "--out", train}).exit_code == 0);
  auto r = run_memtwin({"report", train, "--out", train + "/report.html"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(figures_in(train + "/report.html") ==
        std::vector<std::string>{"memory-breakdown", "memory-timeline", "step-timeline", "communication"});

  REQUIRE(run_memtwin({"run", source_path("scenarios/serving/llama3-8b-h100-kivi4-kv.yaml"), "--out", serve, "--set",
                       "inference.workload.requests=300"}).exit_code == 0);
  REQUIRE(run_memtwin({"report", serve, "--out", serve + "/report.html"}).exit_code == 0);
  // No preemptions and no host traffic in this run: no empty panels for them.
  CHECK(figures_in(serve + "/report.html") == std::vector<std::string>{"memory-breakdown", "latency-cdf", "kv-occupancy"});
  // A KV pool too small for the load, preempting by swap to host memory: both panels, with data.
  const std::string swap = "/tmp/memtwin-test-report-swap";
  REQUIRE(run_memtwin({"run", source_path("scenarios/serving/llama3-8b-h100-fp16-kv.yaml"), "--out", swap, "--set",
                       "inference.workload.requests=300", "--set", "inference.workload.rate=40/s", "--set",
                       "inference.kv_cache.memory=4GiB", "--set", "inference.serving.preemption=swap"}).exit_code == 0);
  REQUIRE(run_memtwin({"report", swap, "--out", swap + "/report.html"}).exit_code == 0);
  CHECK(figures_in(swap + "/report.html") ==
        std::vector<std::string>{"memory-breakdown", "latency-cdf", "kv-occupancy", "tier-traffic", "preemptions"});

  // A disaggregated deployment: the links the KV transfers cross, over time.
  const std::string disagg = "/tmp/memtwin-test-report-disagg";
  REQUIRE(run_memtwin({"run", source_path("scenarios/serving/llama3-8b-disagg-2p2d-h100.yaml"), "--out", disagg, "--set",
                       "inference.workload.requests=300"}).exit_code == 0);
  REQUIRE(run_memtwin({"report", disagg, "--out", disagg + "/report.html"}).exit_code == 0);
  CHECK(figures_in(disagg + "/report.html") ==
        std::vector<std::string>{"memory-breakdown", "latency-cdf", "kv-occupancy", "link-utilization"});

  const std::string sweep = "/tmp/memtwin-test-report-sweep";
  std::filesystem::remove_all(sweep);
  REQUIRE(run_memtwin({"sweep", source_path("scenarios/quickstart.yaml"), "--grid", "training.seq_len=2048,4096,8192,16384",
                       "--grid", "training.micro_batch=1,2", "--backend", "analytic", "-j", "2", "--out", sweep})
              .exit_code == 0);
  REQUIRE(run_memtwin({"report", sweep, "--out", sweep + "/report.html"}).exit_code == 0);
  CHECK(figures_in(sweep + "/report.html") == std::vector<std::string>{"sweep"});

  // A sweep over request rate, and a plan's rate search, draw the load curve.
  const std::string rates = "/tmp/memtwin-test-report-rates";
  std::filesystem::remove_all(rates);
  REQUIRE(run_memtwin({"sweep", source_path("scenarios/serving/llama3-8b-h100-fp16-kv.yaml"), "--grid",
                       "inference.workload.rate=5/s,20/s,40/s", "--set", "inference.workload.requests=200", "-j", "2", "--out", rates})
              .exit_code == 0);
  REQUIRE(run_memtwin({"report", rates, "--out", rates + "/report.html"}).exit_code == 0);
  CHECK(figures_in(rates + "/report.html") == std::vector<std::string>{"sweep", "load-curve"});
  auto plan = run_memtwin({"plan", source_path("scenarios/serving/llama3-8b-h100-fp16-kv.yaml"), "--require",
                           "latency_s.ttft.p99 <= 2", "--max-rate", "5/s..60/s", "--set", "inference.workload.requests=200",
                           "-j", "2", "--json"});
  REQUIRE(plan.exit_code == 0);
  {
    std::ofstream(rates + "/plan.json") << plan.out;
  }
  REQUIRE(run_memtwin({"report", rates + "/plan.json", "--out", rates + "/plan.html"}).exit_code == 0);
  CHECK(figures_in(rates + "/plan.html") == std::vector<std::string>{"load-curve"});

  auto bad = run_memtwin({"report", "/no/such/result.json", "--out", "/tmp/x.html"});
  CHECK(bad.exit_code == 2);
}

TEST_CASE("a validation report shows the errors and both sides' memory or latency", "[unit]") {
  // Uncalibrated and short: this checks the report, not the prediction ([validation] does that).
  const std::string train = "/tmp/memtwin-test-report-validate-train", serve = "/tmp/memtwin-test-report-validate-serve";
  std::filesystem::remove_all(train);
  std::filesystem::remove_all(serve);
  auto t = run_memtwin({"validate", source_path("scenarios/host/train-zero3-2ranks.yaml"), "--steps", "1", "--out", train});
  INFO(t.out << t.err);
  REQUIRE(t.exit_code == 0);
  REQUIRE(run_memtwin({"report", train, "--out", train + "/report.html"}).exit_code == 0);
  CHECK(figures_in(train + "/report.html") == std::vector<std::string>{"validation", "memory-timeline-compare"});
  auto v = run_memtwin({"validate", source_path("scenarios/host/serve-fp16-kv.yaml"), "--set", "inference.workload.requests=6",
                        "--out", serve});
  INFO(v.out << v.err);
  REQUIRE(v.exit_code == 0);
  REQUIRE(run_memtwin({"report", serve + "/validation.json", "--out", serve + "/report.html"}).exit_code == 0);
  CHECK(figures_in(serve + "/report.html") == std::vector<std::string>{"validation", "latency-cdf-compare"});
  std::ifstream html(serve + "/report.html");
  const std::string text((std::istreambuf_iterator<char>(html)), std::istreambuf_iterator<char>());
  CHECK_THAT(text, Catch::Contains("Predicted against measured") && Catch::Contains("latency_s.ttft.p50"));
}
