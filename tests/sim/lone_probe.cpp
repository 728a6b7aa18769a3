// Test helper: asks sim/lone_collectives.h, on a scenario's platform, which collectives may run as
// one of their flows. One SimGrid engine per process (it cannot restart).
//   lone_probe SCENARIO < COMMANDS
// One command per line; a host is gN (GPU slot N) or cN (node N's CPUs), a flow SRC>DST:BYTES
// between GPU slots:
//   add COMMUNICATOR SRC DST            traffic over the route from SRC to DST (-1: a copy's)
//   streams COMMUNICATOR                its collectives run on more than one stream
//   ask COMMUNICATOR FLOW [FLOW]...     prints "flows INDEX..." (those standing for all) or "all"
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include <simgrid/s4u.hpp>

#include "models/scenario_loader.h"
#include "sim/engine_setup.h"
#include "sim/lone_collectives.h"
#include "sim/platform.h"

using namespace memtwin;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: lone_probe SCENARIO < COMMANDS\n");
    return 2;
  }
  const Scenario s = load_scenario_file(argv[1]).scenario;
  auto engine = sim::make_engine();
  const sim::Platform platform = sim::build_platform(s.cluster);
  sim::LoneCollectives lone(platform.gpus);
  auto host = [&](const std::string& name) -> const simgrid::s4u::Host* {
    const auto index = static_cast<std::size_t>(std::stoi(name.substr(1)));
    return name[0] == 'c' ? platform.cpus.at(index) : platform.gpus.at(index);
  };
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream words(line);
    std::string command;
    int communicator = 0;
    if (!(words >> command >> communicator)) continue;
    if (command == "add") {
      std::string src, dst;
      words >> src >> dst;
      lone.add(communicator, host(src), host(dst));
    } else if (command == "streams") {
      lone.on_several_streams(communicator);
    } else if (command == "ask") {
      std::vector<sim::Flow> flows;
      std::string flow;
      while (words >> flow) {
        const auto arrow = flow.find('>'), colon = flow.find(':');
        flows.push_back({std::stoi(flow.substr(0, arrow)), std::stoi(flow.substr(arrow + 1, colon - arrow - 1)),
                         std::stod(flow.substr(colon + 1))});
      }
      const auto kept = lone.stand_ins(communicator, flows);
      std::string answer = kept ? "flows" : "all";
      if (kept)
        for (std::size_t i : *kept) answer += " " + std::to_string(i);
      std::printf("%s\n", answer.c_str());
    } else {
      std::fprintf(stderr, "lone_probe: unknown command '%s'\n", command.c_str());
      return 2;
    }
  }
  return 0;
}
