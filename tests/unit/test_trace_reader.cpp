// Request traces and empirical length files: every malformed input is refused with its file, row,
// column and what is wrong (exit 2 through memtwin check), and the accepted variants read right.
#include <catch2/catch.hpp>

#include <fstream>

#include "models/scenario/scenario_error.h"
#include "models/serving/request_stream.h"
#include "tests/test_support.h"

using namespace memtwin;

namespace {

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = "/tmp/memtwin-test-trace-" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

struct BadTrace {
  const char* name;
  const char* text;
  const char* message;  // a fragment of the error
  int line, column;
};

}  // namespace

TEST_CASE("malformed traces are refused with their row, column and what is wrong", "[unit]") {
  const BadTrace cases[] = {
      {"unit-in-cell", "arrival_s,prompt_tokens,output_tokens\n0.5s,100,10\n", "'0.5s' is not a number", 2, 1},
      {"nan-arrival", "arrival_s,prompt_tokens,output_tokens\n0,10,10\nnan,100,10\n", "negative or not finite", 3, 1},
      {"negative", "arrival_s,prompt_tokens,output_tokens\n-1,100,10\n", "negative or not finite", 2, 1},
      {"unsorted", "arrival_s,prompt_tokens,output_tokens\n2,100,10\n1,100,10\n", "earlier than the previous row", 3, 1},
      {"header-only", "arrival_s,prompt_tokens,output_tokens\n", "no requests", 1, 1},
      {"empty", "", "the header needs arrival_s", 1, 1},
      {"missing-column", "arrival_s,prompt_tokens\n0,100\n", "the header needs", 1, 1},
      {"too-few-cells", "arrival_s,prompt_tokens,output_tokens\n0,100\n", "too few columns", 2, 6},
      {"token-overflow", "arrival_s,prompt_tokens,output_tokens\n0,99999999999,10\n", "outside 0..", 2, 3},
      {"fractional-tokens", "arrival_s,prompt_tokens,output_tokens\n0,1.5,10\n", "not a whole number", 2, 3},
      {"tokens-with-unit", "arrival_s,prompt_tokens,output_tokens\n0,100tokens,10\n", "not a whole number", 2, 3},
      {"bad-timestamp", "TIMESTAMP,ContextTokens,GeneratedTokens\n12:3,100,10\n", "neither seconds nor", 2, 1},
      {"bad-clock", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 25:00:00,100,10\n", "not a valid", 2, 1},
  };
  for (const BadTrace& c : cases) {
    INFO(c.name);
    const std::string path = write_file(std::string(c.name) + ".csv", c.text);
    try {
      read_trace(path);
      FAIL("accepted a bad trace");
    } catch (const ScenarioError& e) {
      CHECK_THAT(e.what(), Catch::Contains(c.message));
      CHECK(e.key() == "inference.workload.trace");
      CHECK(e.where().file == path);
      CHECK(e.where().line == c.line);
      CHECK(e.where().column == c.column);
    }
  }
}

TEST_CASE("traces with a byte-order mark, quoted cells, Azure timestamps across midnight read right", "[unit]") {
  const auto requests = read_trace(write_file(
      "azure.csv", "\xEF\xBB\xBFTIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                   "2023-11-16 23:59:59.5,\"100\",10\r\n2023-11-17 00:00:00.25,200,0\r\n"));
  REQUIRE(requests.size() == 2);
  CHECK(requests[0].arrival_s == 0);
  CHECK(requests[1].arrival_s == Approx(0.75));  // the next day, not 24 hours earlier
  CHECK(requests[0].prompt_tokens == 100);
  CHECK(requests[1].output_tokens == 1);  // a 0-token row still costs one token
}

TEST_CASE("empirical length files are read strictly", "[unit]") {
  CHECK(read_lengths(write_file("lengths.txt", "100\n\n250.5\r\n")) == std::vector<double>{100, 250.5});
  for (const auto& [text, line] : {std::pair<const char*, int>{"100\nabc\n200\n", 2}, {"100\n-5\n", 2}, {"nan\n", 1}}) {
    INFO(text);
    try {
      read_lengths(write_file("bad-lengths.txt", text), "inference.workload.prompt_tokens.file");
      FAIL("accepted a bad length file");
    } catch (const ScenarioError& e) {
      CHECK(e.where().line == line);
      CHECK(e.key() == "inference.workload.prompt_tokens.file");
    }
  }
  CHECK_THROWS_AS(read_lengths(write_file("no-lengths.txt", "\n\n")), ScenarioError);
}

TEST_CASE("memtwin check reads the trace a scenario names and refuses a bad one with its location", "[unit]") {
  const std::string trace = write_file("check.csv", "arrival_s,prompt_tokens,output_tokens\n0,100,10\n1,abc,10\n");
  const std::string scenario = write_file("check.yaml", "name: bad-trace\ncluster: {nodes: 1, gpus_per_node: 1, gpu: h100-sxm}\n"
                                                        "model: llama-2-7b\ninference:\n  workload: {trace: " + trace + "}\n");
  const auto r = test::run_memtwin({"check", scenario});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains(trace + ":3:3"));
  CHECK_THAT(r.err, Catch::Contains("inference.workload.trace"));
}

TEST_CASE("a trace's prompt past max_model_len is refused with its row, and a too-long output is cut", "[unit]") {
  const std::string trace = write_file("context.csv", "arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.1,9000,5\n");
  std::vector<Request> requests = read_trace(trace);
  try {
    fit_trace_to_context(requests, trace, 8192);
    FAIL("accepted a prompt longer than the context");
  } catch (const ScenarioError& e) {
    CHECK(e.where().line == 3);
    CHECK_THAT(e.what(), Catch::Contains("9000-token prompt does not fit inference.serving.max_model_len (8192)"));
  }
  std::vector<Request> fits = read_trace(write_file("cut.csv", "arrival_s,prompt_tokens,output_tokens\n0,8000,500\n0.1,10,5\n"));
  CHECK(fit_trace_to_context(fits, "cut.csv", 8192) == 1);
  CHECK(fits[0].output_tokens == 192);
  CHECK(fits[1].output_tokens == 5);
  // memtwin check applies the same rule.
  const std::string scenario = write_file("context.yaml", "name: long-prompt\ncluster: {nodes: 1, gpus_per_node: 1, gpu: h100-sxm}\n"
                                                          "model: llama-2-7b\ninference:\n  serving: {max_model_len: 4096}\n"
                                                          "  workload: {trace: " + trace + "}\n");
  const auto r = test::run_memtwin({"check", scenario});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains(trace + ":3:1"));
}
