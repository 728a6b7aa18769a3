// libFuzzer harness: the real model's files (hw/host/real_model.h, hw/host/bpe_tokenizer.h).
// MEMTWIN_FUZZ_FILE_KIND picks which at build time: 1, a converted model's model.json (in a
// directory of its own, without weights.f32: what is checked before the weights are read); 2, a
// tokenizer.json. Bad input raises ScenarioError naming the file and key.
#include <filesystem>

#include "hw/host/bpe_tokenizer.h"
#include "hw/host/real_model.h"
#include "models/scenario/scenario_error.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
#if MEMTWIN_FUZZ_FILE_KIND == 1
    static const bool made = std::filesystem::create_directories(
        memtwin::fuzz::scratch_dir() + "/memtwin-fuzz-" + std::to_string(getpid()) + "-model");
    (void)made;
    const std::filesystem::path file = memtwin::fuzz::write_input(data, size, "model/model.json");
    (void)memtwin::hw::RealModel::load(file.parent_path());
#else
    const auto tokenizer = memtwin::hw::BpeTokenizer::load(memtwin::fuzz::write_input(data, size, "tokenizer.json"));
    (void)tokenizer.encode("Tell me, 2 cafés: what's 1984?  \n");
#endif
  } catch (const memtwin::ScenarioError&) {
  }
  return 0;
}
