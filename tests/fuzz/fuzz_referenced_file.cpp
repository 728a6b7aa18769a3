// libFuzzer harness: a file a scenario refers to, read through the scenario loader as a run reads
// it. MEMTWIN_FUZZ_FILE_KIND picks which at build time: a calibration file (cluster.calibration),
// a HuggingFace config.json (model.hf_config) or a `memtwin quality` document
// (inference.kv_cache.quality). Bad input raises ScenarioError.
#include "models/scenario_loader.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

#if MEMTWIN_FUZZ_FILE_KIND == 1
const char* const kFileName = "calibration.yaml";
std::string scenario_naming(const std::string& path) {
  return "name: calibrated\ncluster: {nodes: 2, gpus_per_node: 8, gpu: h100-sxm, calibration: '" + path +
         "'}\nmodel: llama-2-7b\ntraining: {micro_batch: 1, seq_len: 2048, global_batch: 16}\n";
}
#elif MEMTWIN_FUZZ_FILE_KIND == 3
const char* const kFileName = "quality.json";
std::string scenario_naming(const std::string& path) {
  return "name: quality\ncluster: {nodes: 1, gpus_per_node: 1, gpu: h100-sxm}\nmodel: llama-2-7b\n"
         "inference: {kv_cache: {compression: {method: kivi, bits: 4}, quality: '" + path +
         "'}, workload: {rate: 1/s, requests: 10, prompt_tokens: 128, output_tokens: 16}}\n";
}
#else
const char* const kFileName = "config.json";
std::string scenario_naming(const std::string& path) {
  return "name: hf\ncluster: {nodes: 1, gpus_per_node: 8, gpu: h100-sxm}\nmodel: {hf_config: '" + path +
         "'}\ninference: {workload: {rate: 1/s, requests: 10, prompt_tokens: 128, output_tokens: 16}}\n";
}
#endif

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = memtwin::fuzz::write_input(data, size, kFileName);
  try {
    const memtwin::LoadedScenario loaded = memtwin::load_scenario_text(scenario_naming(path), "<fuzz>", "");
    (void)loaded.resolved.dump();
  } catch (const memtwin::ScenarioError&) {
  }
  return 0;
}
