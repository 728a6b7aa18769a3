// Test helper: simulates only collectives on a scenario's platform and prints the time, so tests
// can hold the flow model to closed forms. One simulation per process (SimGrid cannot restart).
//   collective_probe SCENARIO all_reduce|all_gather|reduce_scatter BYTES RANKS [CONCURRENT]
// CONCURRENT identical collectives over the same ranks run at once (contention on shared links).
#include <cstdio>
#include <string>

#include <simgrid/s4u.hpp>

#include "models/scenario_loader.h"
#include "sim/collectives.h"
#include "sim/engine_setup.h"

namespace sg4 = simgrid::s4u;
using namespace memtwin;

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: collective_probe SCENARIO KIND BYTES RANKS [CONCURRENT]\n");
    return 2;
  }
  const Scenario s = load_scenario_file(argv[1]).scenario;
  const std::string kind_name = argv[2];
  const Collective kind = kind_name == "all_gather"       ? Collective::all_gather
                          : kind_name == "reduce_scatter" ? Collective::reduce_scatter
                                                          : Collective::all_reduce;
  const double bytes = std::stod(argv[3]);
  const int ranks = std::stoi(argv[4]);
  const int concurrent = argc > 5 ? std::stoi(argv[5]) : 1;
  auto engine = sim::make_engine();
  const sim::Platform platform = sim::build_platform(s.cluster);
  std::vector<int> group;
  for (int r = 0; r < ranks; ++r) group.push_back(r);
  for (int c = 0; c < concurrent; ++c) {
    sg4::Actor::create("collective" + std::to_string(c), platform.gpus[0], [&] {
      sim::run_collective(sim::plan_collective(kind, group, bytes, platform.node_of_gpu, s.cluster), platform);
    });
  }
  engine->run();
  std::printf("%.9e\n", sg4::Engine::get_clock());
  return 0;
}
