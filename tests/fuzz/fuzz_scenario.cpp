// libFuzzer harness: the scenario loader (YAML text -> validated Scenario) and the resolved
// scenario's JSON, which `run --json` writes. Bad input raises ScenarioError.
#include "models/scenario_loader.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const memtwin::LoadedScenario loaded = memtwin::load_scenario_text(memtwin::fuzz::as_text(data, size), "<fuzz>", "");
    (void)loaded.resolved.dump();  // throws on text that JSON cannot carry (invalid UTF-8)
  } catch (const memtwin::ScenarioError&) {
  }
  return 0;
}
