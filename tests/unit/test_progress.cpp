// The progress line of long runs: drawn on a terminal only after a delay, taken away at the end,
// fed by the simulators' own counts, and without effect on any result.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/memtwin/terminal_progress.h"
#include "tests/test_support.h"

using namespace memtwin;
using namespace std::chrono_literals;

namespace {

struct FakeClock {
  std::chrono::steady_clock::time_point now{};
  TerminalProgress::Clock function() {
    return [this] { return now; };
  }
};

// Runs memtwin with MEMTWIN_PROGRESS set for the child.
test::ProcessResult run_with_progress(const char* setting, const std::vector<std::string>& args) {
  setenv("MEMTWIN_PROGRESS", setting, 1);
  test::ProcessResult r = test::run_memtwin(args);
  unsetenv("MEMTWIN_PROGRESS");
  return r;
}

}  // namespace

TEST_CASE("progress text: percent, the total with thousands separators, the unit and whole seconds", "[unit]") {
  CHECK(progress_text(41000, 100000, "requests", 6.7) == "41% of 100,000 requests, 6 s, about 10 s left");
  CHECK(progress_text(41000, 100000, "requests", 0.7) == "41% of 100,000 requests, 0 s");  // no pace yet
  CHECK(progress_text(7, 7, "ops", 0.2) == "100% of 7 ops, 0 s");
  CHECK(progress_text(0, 0, "ops", 0) == "100% of 0 ops, 0 s");
}

TEST_CASE("the progress line waits for its delay, redraws in place and is taken away", "[unit]") {
  FakeClock clock;
  std::ostringstream out;
  {
    TerminalProgress line(out, true, 2s, clock.function());
    for (int i = 1; i <= 2048; ++i) line.report(i, 100000, "requests");
    CHECK(out.str().empty());  // a quick run prints nothing
    clock.now += 3s;
    for (int i = 2049; i <= 41984; ++i) line.report(i, 100000, "requests");
    // Then on the next 1,024th report (the 3,072nd), and at most every 200 ms.
    CHECK(out.str() == "\r\033[Kmemtwin: 3% of 100,000 requests, 3 s, about 95 s left");
    clock.now += 1s;
    line.report(100000, 100000, "requests");  // the last report draws at once
    CHECK(out.str().find("100% of 100,000 requests, 4 s") != std::string::npos);
  }
  CHECK(out.str().substr(out.str().size() - 4) == "\r\033[K");  // cleared
}

TEST_CASE("a disabled progress line prints nothing", "[unit]") {
  FakeClock clock;
  std::ostringstream out;
  {
    TerminalProgress line(out, false, 0s, clock.function());
    clock.now += 10s;
    for (int i = 1; i <= 5000; ++i) line.report(i, 5000, "ops");
  }
  CHECK(out.str().empty());
}

TEST_CASE("serving and training simulations report their progress and their results do not depend on it", "[unit][heavy]") {
  for (const std::string scenario : {"scenarios/serving/llama3-8b-h100-fp16-kv.yaml", "scenarios/serving/llama3-8b-disagg-2p2d-h100.yaml",
                                     "scenarios/training/llama2-70b-fsdp-64xh100.yaml"}) {
    INFO(scenario);
    const std::vector<std::string> args = {"run", test::source_path(scenario), "--backend", "sim", "--json"};
    const test::ProcessResult shown = run_with_progress("always", args);
    const test::ProcessResult hidden = run_with_progress("never", args);
    REQUIRE(shown.exit_code == 0);
    REQUIRE(hidden.exit_code == 0);
    CHECK(shown.out == hidden.out);  // stdout byte for byte
    const auto doc = nlohmann::json::parse(shown.out);
    const bool serving = doc["simulated"].contains("requests");
    // The last report is always drawn: every request finished, or every op of the simulated ranks.
    const std::string line = serving ? progress_text(doc["simulated"]["requests"].get<std::uint64_t>(),
                                                     doc["simulated"]["requests"].get<std::uint64_t>(), "requests", 0)
                                     : "100% of ";
    const std::string last = line.substr(0, line.find(", "));
    CHECK(shown.err.find("memtwin: " + last) != std::string::npos);
    if (!serving) CHECK(shown.err.find(" ops, ") != std::string::npos);
    CHECK(shown.err.find("\r\033[K") != std::string::npos);
    CHECK(hidden.err.find("memtwin: ") == std::string::npos);
  }
}

TEST_CASE("a sweep draws one line for its points, and its point processes run with theirs off", "[unit]") {
  setenv("MEMTWIN_PROGRESS", "always", 1);
  const std::vector<std::string> env = TerminalProgress::quiet_child_environment();
  unsetenv("MEMTWIN_PROGRESS");
  CHECK(std::count(env.begin(), env.end(), "MEMTWIN_PROGRESS=never") == 1);
  CHECK(std::count(env.begin(), env.end(), "MEMTWIN_PROGRESS=always") == 0);

  const std::string dir = "/tmp/memtwin-test-sweep-progress";
  std::filesystem::remove_all(dir);
  const test::ProcessResult r =
      run_with_progress("always", {"sweep", test::source_path("scenarios/quickstart.yaml"), "--grid", "training.micro_batch=1,2",
                                   "--backend", "analytic", "-j", "2", "--out", dir});
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("memtwin: 100% of 2 points") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("an unknown MEMTWIN_PROGRESS is said, not silently taken", "[unit]") {
  const test::ProcessResult r =
      run_with_progress("yes", {"run", test::source_path("scenarios/quickstart.yaml"), "--backend", "analytic", "--json"});
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("MEMTWIN_PROGRESS=yes: expected auto, always or never; using auto") != std::string::npos);
}
