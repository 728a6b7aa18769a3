// A program of someone else's: the peak GPU memory per rank of a training scenario, in bytes, from
// memtwin's installed library (the same figure as `memtwin run --backend analytic`'s
// memory.gpu.peak_bytes).
#include <cstdio>
#include <exception>

#include "models/memory/training_memory.h"
#include "models/scenario_loader.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: peak_memory SCENARIO.yaml\n");
    return 2;
  }
  try {
    const memtwin::LoadedScenario loaded = memtwin::load_scenario_file(argv[1]);
    std::printf("%lld\n", static_cast<long long>(memtwin::training_memory(loaded.scenario).peak.count()));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
