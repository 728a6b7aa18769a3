// Request traces and empirical length files: every malformed input is refused with its file, row,
// column and what is wrong (exit 2 through memtwin check), and the accepted variants read right.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>

#include "models/scenario/scenario_error.h"
#include "models/scenario_loader.h"
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

// Each case's file (NAME + suffix), given to `read`, is refused with its message, at its line and
// column, under `key`, naming the file.
template <class Cases, class Read>
void check_refused(const Cases& cases, const std::string& suffix, Read read, const std::string& key) {
  for (const BadTrace& c : cases) {
    INFO(c.name);
    const std::string path = write_file(std::string(c.name) + suffix, c.text);
    try {
      read(path);
      FAIL("accepted a bad file");
    } catch (const ScenarioError& e) {
      CHECK_THAT(e.what(), Catch::Contains(c.message));
      CHECK(e.key() == key);
      CHECK(e.where().file == path);
      CHECK(e.where().line == c.line);
      CHECK(e.where().column == c.column);
    }
  }
}

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
  check_refused(cases, ".csv", [](const std::string& path) { (void)read_trace(path); }, "inference.workload.trace");
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

TEST_CASE("BurstGPT's CSV and JSON Lines traces read right, and Mooncake's hash_ids become shared prefixes", "[unit]") {
  // BurstGPT: seconds from the trace's start, its own column names, failed requests with 0 tokens.
  const auto burst = read_trace(write_file("burstgpt.csv",
                                           "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                                           "5,ChatGPT,472,18,490,Conversation log\n45,GPT-4,1087,0,1087,API log\n"));
  REQUIRE(burst.size() == 2);
  CHECK(burst[1].arrival_s == 40);
  CHECK(burst[1].prompt_tokens == 1087);
  CHECK(burst[1].output_tokens == 1);
  // memtwin's names, one object a line, with a byte-order mark.
  const auto lines = read_trace(write_file("plain.jsonl", "\xEF\xBB\xBF{\"arrival_s\": 0.5, \"prompt_tokens\": 100, \"output_tokens\": 20}\n\n"
                                                          "{\"arrival_s\": 1.25, \"prompt_tokens\": 300, \"output_tokens\": 5}\r\n"));
  REQUIRE(lines.size() == 2);
  CHECK(lines[1].arrival_s == 1.25);
  CHECK(lines[0].prefix_group == -1);
  // Mooncake: millisecond timestamps; requests 0 and 2 start with the same two 512-token blocks,
  // request 1 shares only the first with them.
  const auto moon = read_trace(write_file(
      "mooncake.jsonl",
      "{\"timestamp\": 27482, \"input_length\": 1500, \"output_length\": 52, \"hash_ids\": [46, 47, 48]}\n"
      "{\"timestamp\": 30535, \"input_length\": 700, \"output_length\": 10, \"hash_ids\": [46, 99]}\n"
      "{\"timestamp\": 32235, \"input_length\": 1100, \"output_length\": 8, \"hash_ids\": [46, 47, 12]}\n"
      "{\"timestamp\": 40000, \"input_length\": 300, \"output_length\": 8, \"hash_ids\": [7]}\n"));
  REQUIRE(moon.size() == 4);
  CHECK(moon[1].arrival_s == Approx(3.053));
  CHECK(moon[0].prefix_group == moon[2].prefix_group);
  CHECK(moon[0].prefix_group == moon[1].prefix_group);  // grouped by the first block
  CHECK(moon[0].prefix_tokens == 1024);
  CHECK(moon[2].prefix_tokens == 1024);
  CHECK(moon[1].prefix_tokens == 512);
  CHECK(moon[3].prefix_group == -1);  // nobody shares its block

  const BadTrace cases[] = {
      {"not-json", "{\"arrival_s\": 0, \"prompt_tokens\": 1, \"output_tokens\": 1}\n{oops}\n", "not a JSON object", 2, 1},
      {"no-output", "{\"arrival_s\": 0, \"prompt_tokens\": 1}\n", "no output length (output_tokens or output_length)", 1, 1},
      {"two-names", "{\"arrival_s\": 0, \"timestamp\": 5, \"prompt_tokens\": 1, \"output_tokens\": 1}\n", "keep one", 1, 1},
      {"bad-hash", "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [\"a\"]}\n", "hash_ids", 1, 1},
      {"unsorted", "{\"arrival_s\": 2, \"prompt_tokens\": 1, \"output_tokens\": 1}\n{\"arrival_s\": 1, \"prompt_tokens\": 1, \"output_tokens\": 1}\n",
       "earlier than the previous line", 2, 1},
      {"fraction", "{\"arrival_s\": 0, \"prompt_tokens\": 1.5, \"output_tokens\": 1}\n", "not a whole number", 1, 1},
  };
  for (const BadTrace& c : cases) {
    INFO(c.name);
    const std::string path = write_file(std::string(c.name) + ".jsonl", c.text);
    try {
      read_trace(path);
      FAIL("accepted a bad trace");
    } catch (const ScenarioError& e) {
      CHECK_THAT(e.what(), Catch::Contains(c.message));
      CHECK(e.where().line == c.line);
    }
  }
}

TEST_CASE("a trace replayed at a rate keeps its bursts and reaches that mean rate", "[unit]") {
  // Three requests in a burst, one a second later: 3 gaps over 1.2 s, 2.5 requests per second.
  std::vector<Request> r = read_trace(write_file("burst.csv", "arrival_s,prompt_tokens,output_tokens\n"
                                                              "10,100,10\n10.1,100,10\n10.2,100,10\n11.2,100,10\n"));
  scale_trace_to_rate(r, "burst.csv", 10.0);  // four times as fast
  CHECK(r[0].arrival_s == Approx(10));
  CHECK(r[1].arrival_s == Approx(10.025));
  CHECK(r[3].arrival_s == Approx(10.3));
  CHECK(3 / (r[3].arrival_s - r[0].arrival_s) == Approx(10.0));
  std::vector<Request> instant = read_trace(write_file("instant.csv", "arrival_s,prompt_tokens,output_tokens\n5,1,1\n5,1,1\n"));
  CHECK_THROWS_WITH(scale_trace_to_rate(instant, "instant.csv", 1.0), Catch::Contains("one instant"));
}

TEST_CASE("workload.lengths draws (prompt, output) pairs together, never one row's prompt with another's output", "[unit]") {
  const std::string pairs = write_file("pairs.csv", "\xEF\xBB\xBFinput_len,output_len,source\n100,900,chat\n2000,20,summary\n\n");
  const std::string scenario = "name: pairs\ncluster: {nodes: 1, gpus_per_node: 1, gpu: h100-sxm}\nmodel: llama-3-8b\n"
                               "inference:\n  workload: {arrival: poisson, rate: 5/s, requests: 400, lengths: " + pairs + "}\n";
  const LoadedScenario loaded = load_scenario_text(scenario, "pairs.yaml", "/tmp");
  const auto requests = generate_requests(*loaded.scenario.inference, 7);
  REQUIRE(requests.size() == 400);
  int chat = 0, summary = 0;
  for (const auto& r : requests) {
    const bool is_chat = r.prompt_tokens == 100 && r.output_tokens == 900;
    const bool is_summary = r.prompt_tokens == 2000 && r.output_tokens == 20;
    CHECK((is_chat || is_summary));  // drawn apart, 100 with 20 or 2000 with 900 would appear
    chat += is_chat;
    summary += is_summary;
  }
  // Each row about half the time (binomial 400, 1/2: within 6 standard deviations).
  CHECK(std::abs(chat - 200) < 60);
  CHECK(chat + summary == 400);
  // A trace's lengths serve as pairs too (its arrivals ignored).
  const std::string trace = write_file("pairs-trace.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,300,30\n1,300,30\n");
  CHECK(read_length_pairs(trace).size() == 2);
  CHECK(read_length_pairs(trace)[0].prompt == 300);
}

TEST_CASE("workload.lengths refuses a bad file at its row and column, and the distributions beside it", "[unit]") {
  const BadTrace cases[] = {
      {"pairs-no-output", "prompt_tokens,arrival_s\n10,0\n", "no output column", 1, 1},
      {"pairs-two-prompts", "prompt_tokens,input_len,output_tokens\n1,2,3\n", "repeats the prompt column", 1, 15},
      {"pairs-fraction", "prompt_tokens,output_tokens\n10,2.5\n", "the output length '2.5' is not a whole number", 2, 4},
      {"pairs-short", "prompt_tokens,output_tokens\n10\n", "too few columns", 2, 3},
      {"pairs-empty", "prompt_tokens,output_tokens\n", "no length pairs", 1, 1},
  };
  check_refused(cases, ".csv", [](const std::string& path) { (void)read_length_pairs(path); }, "inference.workload.lengths");
  const std::string pairs = write_file("pairs-ok.csv", "prompt_tokens,output_tokens\n10,10\n");
  const std::string both = "name: both\ncluster: {nodes: 1, gpus_per_node: 1, gpu: h100-sxm}\nmodel: llama-3-8b\ninference:\n"
                           "  workload: {arrival: poisson, rate: 5/s, lengths: " + pairs + ", prompt_tokens: 100, output_tokens: 10}\n";
  CHECK_THROWS_WITH(load_scenario_text(both, "both.yaml", "/tmp"), Catch::Contains("conflicts with workload.lengths"));
}
