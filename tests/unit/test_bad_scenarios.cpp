#include <catch2/catch.hpp>

#include <fstream>

#include "models/scenario_loader.h"
#include "tests/test_support.h"

using namespace memtwin;

namespace {

struct Expectation {
  std::string message;  // from the "# expect: ..." first line
  int line = 0;         // the line marked "# <- here", 0 when none is marked
};

Expectation read_expectation(const std::string& path) {
  std::ifstream in(path);
  Expectation e;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (n == 1 && line.rfind("# expect: ", 0) == 0) e.message = line.substr(10);
    if (line.find("# <- here") != std::string::npos) e.line = n;
  }
  return e;
}

}  // namespace

TEST_CASE("each bad scenario is rejected with its expected message, file and line", "[unit]") {
  auto files = test::files_under("tests/bad_scenarios", ".yaml");
  REQUIRE(files.size() >= 30);
  for (const auto& f : files) {
    Expectation expected = read_expectation(f);
    INFO(f);
    REQUIRE_FALSE(expected.message.empty());
    try {
      load_scenario_file(f);
      FAIL("accepted a bad scenario");
    } catch (const ScenarioError& e) {
      CHECK_THAT(e.what(), Catch::Contains(expected.message));
      CHECK(e.where().file == f);
      if (expected.line > 0) CHECK(e.where().line == expected.line);
    }
  }
}

TEST_CASE("each bad calibration file is refused with its expected message, naming it and the line", "[unit]") {
  auto files = test::files_under("tests/bad_inputs/calibration", ".yaml");
  REQUIRE(files.size() >= 10);
  for (const auto& f : files) {
    const Expectation expected = read_expectation(f);
    INFO(f);
    REQUIRE_FALSE(expected.message.empty());
    const std::string text = "name: calibrated\ncluster: {nodes: 1, gpus_per_node: 2, gpu: h100-sxm, calibration: " + f +
                             "}\nmodel: llama-2-7b\ntraining: {micro_batch: 1, seq_len: 2048, global_batch: 2}\n";
    try {
      load_scenario_text(text, "calibrated.yaml", ".");
      FAIL("accepted a bad calibration file");
    } catch (const ScenarioError& e) {
      CHECK_THAT(e.what(), Catch::Contains(expected.message));
      CHECK(e.where().file == f);
      if (expected.line > 0) CHECK(e.where().line == expected.line);
    }
  }
}
