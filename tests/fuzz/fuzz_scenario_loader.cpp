// libFuzzer harness for the scenario loader. Contract under test: any input either loads or
// raises ScenarioError; anything else (another exception, a crash, a sanitizer report) is a bug.
// Built by scripts/fuzz-loader.sh (clang, -DMEMTWIN_FUZZ=ON); not part of CI.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "models/scenario_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    memtwin::load_scenario_text(text, "<fuzz>", "");
  } catch (const memtwin::ScenarioError&) {
    // the expected outcome for bad input
  }
  return 0;
}
