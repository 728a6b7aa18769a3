// libFuzzer harness: request traces (read_trace, then the engine's context rules), empirical
// length files (read_lengths) and length-pair files (read_length_pairs) read the same bytes. Bad
// input raises ScenarioError.
#include "models/serving/request_stream.h"
#include "models/scenario/scenario_error.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = memtwin::fuzz::write_input(data, size, "trace.csv");
  try {
    std::vector<memtwin::Request> requests = memtwin::read_trace(path);
    memtwin::fit_trace_to_context(requests, path, 8192);
  } catch (const memtwin::ScenarioError&) {
  }
  try {
    (void)memtwin::read_lengths(path);
  } catch (const memtwin::ScenarioError&) {
  }
  try {
    (void)memtwin::read_length_pairs(path);
  } catch (const memtwin::ScenarioError&) {
  }
  return 0;
}
