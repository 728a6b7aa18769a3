// memtwin sweep: every point once, invalid points recorded, and a killed sweep resumed.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/test_support.h"

using memtwin::test::run_memtwin;
using memtwin::test::source_path;

namespace {
std::vector<nlohmann::json> lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}
}  // namespace

TEST_CASE("a sweep runs the product of the grids in parallel and records invalid points", "[unit]") {
  const std::string dir = "/tmp/memtwin-test-sweep";
  std::filesystem::remove_all(dir);
  auto r = run_memtwin({"sweep", source_path("scenarios/quickstart.yaml"), "--grid", "training.micro_batch=1,2",
                        "--grid", "training.seq_len=2048,4096,oops", "--backend", "analytic", "-j", "2", "--out", dir});
  REQUIRE(r.exit_code == 0);
  const auto points = lines(dir + "/points.jsonl");
  REQUIRE(points.size() == 6);
  std::set<std::string> seen;
  int invalid = 0;
  for (const auto& p : points) {
    seen.insert(p["overrides"].dump());
    if (p["status"] == "invalid") {
      ++invalid;
      CHECK(p["error"].get<std::string>().find("expected a whole number") != std::string::npos);
    } else {
      CHECK(p["result"]["schema"] == "memtwin.result/1");
    }
  }
  CHECK(seen.size() == 6);
  CHECK(invalid == 2);
}

TEST_CASE("a parallel sweep writes the same bytes every time, its points in order", "[unit]") {
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  std::string jsonl[2], csv[2];
  for (int run = 0; run < 2; ++run) {
    const std::string dir = "/tmp/memtwin-test-sweep-order" + std::to_string(run);
    std::filesystem::remove_all(dir);
    // Points of unequal cost (simulated steps of several lengths) finish out of order under -j 3.
    auto r = run_memtwin({"sweep", source_path("scenarios/quickstart.yaml"), "--grid", "training.seq_len=4096,512,2048,1024",
                          "--grid", "training.micro_batch=2,1", "-j", "3", "--out", dir});
    REQUIRE(r.exit_code == 0);
    jsonl[run] = read(dir + "/points.jsonl");
    csv[run] = read(dir + "/points.csv");
    std::size_t expected = 0;
    for (const auto& p : lines(dir + "/points.jsonl")) CHECK(p["point"].get<std::size_t>() == expected++);
    CHECK(expected == 8);
  }
  CHECK(jsonl[0] == jsonl[1]);
  CHECK(csv[0] == csv[1]);
}

TEST_CASE("resuming a killed sweep loses no point and repeats none", "[unit]") {
  const std::string dir = "/tmp/memtwin-test-sweep-resume";
  std::filesystem::remove_all(dir);
  const std::vector<std::string> args = {"sweep", source_path("scenarios/quickstart.yaml"), "--zip",
                                         "training.micro_batch=1,1,2,2", "--zip", "training.seq_len=1024,2048,1024,2048",
                                         "--backend", "analytic", "--out", dir};
  REQUIRE(run_memtwin(args).exit_code == 0);
  // Simulate a kill: two complete lines survive, the third is cut in the middle.
  std::ifstream in(dir + "/points.jsonl");
  std::string l1, l2, l3;
  std::getline(in, l1);
  std::getline(in, l2);
  std::getline(in, l3);
  in.close();
  std::ofstream(dir + "/points.jsonl", std::ios::trunc) << l1 << "\n" << l2 << "\n" << l3.substr(0, l3.size() / 2);
  auto resumed = args;
  resumed.push_back("--resume");
  auto r = run_memtwin(resumed);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("2 run now, 2 already done"));
  std::ifstream again(dir + "/points.jsonl");
  std::set<std::string> points;
  int complete = 0;
  for (std::string line; std::getline(again, line);) {
    try {
      points.insert(nlohmann::json::parse(line)["overrides"].dump());
      ++complete;
    } catch (const std::exception&) {
    }
  }
  CHECK(complete == 4);
  CHECK(points.size() == 4);
}

TEST_CASE("a sweep split over MPI ranks writes the same files as one process", "[unit]") {
  const std::string one = "/tmp/memtwin-test-sweep-one", split = "/tmp/memtwin-test-sweep-mpi";
  std::filesystem::remove_all(one);
  std::filesystem::remove_all(split);
  const std::string grid = " --grid training.micro_batch=1,2,4 --grid training.seq_len=2048,4096 --backend analytic --out ";
  const std::string scenario = source_path("scenarios/quickstart.yaml");
  REQUIRE(std::system((std::string(MEMTWIN_BINARY) + " sweep " + scenario + grid + one + " >/dev/null 2>&1").c_str()) == 0);
  // mpirun refuses root unless told; CI runs as root.
  const std::string mpi = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 3 --oversubscribe " +
                          std::string(MEMTWIN_BINARY) + " sweep " + scenario + grid + split + " >/dev/null 2>&1";
  REQUIRE(std::system(mpi.c_str()) == 0);
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  CHECK(read(split + "/points.jsonl") == read(one + "/points.jsonl"));
  CHECK(read(split + "/points.csv") == read(one + "/points.csv"));
  CHECK(lines(split + "/points.jsonl").size() == 6);
}

TEST_CASE("a grid range doubles from LO to HI, or counts by a step", "[unit]") {
  const std::string dir = "/tmp/memtwin-test-sweep-range";
  std::filesystem::remove_all(dir);
  auto r = run_memtwin({"sweep", source_path("scenarios/quickstart.yaml"), "--grid", "cluster.nodes=1..8", "--grid",
                        "training.micro_batch=1..3:2", "--backend", "analytic", "--out", dir});
  REQUIRE(r.exit_code == 0);
  std::multiset<std::string> seen;
  for (const auto& p : lines(dir + "/points.jsonl")) seen.insert(p["overrides"].dump());
  std::multiset<std::string> expected;
  for (int nodes : {1, 2, 4, 8}) {
    for (int micro : {1, 3}) {
      expected.insert(nlohmann::json::array({"cluster.nodes=" + std::to_string(nodes), "training.micro_batch=" + std::to_string(micro)})
                          .dump());
    }
  }
  CHECK(seen == expected);
  auto bad = run_memtwin({"sweep", source_path("scenarios/quickstart.yaml"), "--grid", "cluster.nodes=8..1", "--out", dir + "-bad"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("8..1"));
}

TEST_CASE("a sweep into a directory with files in it is refused unless it resumes or replaces them", "[unit]") {
  const std::string dir = "/tmp/memtwin-test-sweep-occupied";
  std::filesystem::remove_all(dir);
  auto sweep = [&](const std::string& values, std::vector<std::string> extra) {
    std::vector<std::string> args = {"sweep", source_path("scenarios/quickstart.yaml"), "--grid", "training.micro_batch=" + values,
                                     "--backend", "analytic", "--out", dir};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_memtwin(args);
  };
  REQUIRE(sweep("1,2", {}).exit_code == 0);
  const auto again = sweep("4", {});
  CHECK(again.exit_code == 2);
  CHECK_THAT(again.err, Catch::Contains("already has files in it") && Catch::Contains("--resume") && Catch::Contains("--force"));
  CHECK(lines(dir + "/points.jsonl").size() == 2);  // the earlier points are untouched
  CHECK(sweep("1,2,4", {"--resume"}).exit_code == 0);
  CHECK(lines(dir + "/points.jsonl").size() == 3);  // the two kept, one more run
  REQUIRE(sweep("4", {"--force"}).exit_code == 0);
  const auto replaced = lines(dir + "/points.jsonl");
  REQUIRE(replaced.size() == 1);
  CHECK(replaced[0]["overrides"][0] == "training.micro_batch=4");
  CHECK(sweep("4", {"--force", "--resume"}).exit_code == 2);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a sweep's CSV holds numbers in base units, its unit in the column name, and only its workload's metrics", "[unit]") {
  const std::string dir = "/tmp/memtwin-test-sweep-units";
  std::filesystem::remove_all(dir);
  REQUIRE(run_memtwin({"sweep", source_path("scenarios/serving/llama3-8b-h100-fp16-kv.yaml"), "--grid",
                       "inference.workload.rate=10/s,5/s,600/min", "--grid", "inference.kv_cache.memory=8GiB", "--set",
                       "inference.workload.requests=50", "--out", dir})
              .exit_code == 0);
  std::ifstream in(dir + "/points.csv");
  std::string header, row;
  std::getline(in, header);
  CHECK(header.rfind("point,status,inference.workload.rate_per_s,inference.kv_cache.memory_bytes,memory.gpu.fits,", 0) == 0);
  CHECK(header.find("time.step_s") == std::string::npos);  // a serving sweep has no training columns
  CHECK(header.find("latency_s.ttft.p99") != std::string::npos);
  std::getline(in, row);
  CHECK(row.rfind("0,ok,10,8589934592,", 0) == 0);
  const auto points = lines(dir + "/points.jsonl");
  REQUIRE(points.size() == 3);
  CHECK(points[1]["values"]["inference.workload.rate"] == 5);
  CHECK(points[2]["values"]["inference.workload.rate"] == 10);  // 600/min
  CHECK(points[0]["values"]["inference.kv_cache.memory"] == 8589934592LL);
  std::filesystem::remove_all(dir);
}
