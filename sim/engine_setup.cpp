#include "sim/engine_setup.h"

#include <xbt/log.h>

namespace memtwin::sim {

std::unique_ptr<simgrid::s4u::Engine> make_engine() {
  static int argc = 1;
  static char name[] = "memtwin";
  static char* argv[] = {name, nullptr};
  xbt_log_control_set("root.thres:critical");
  auto engine = std::make_unique<simgrid::s4u::Engine>(&argc, argv);
  simgrid::s4u::Engine::set_config("network/model:CM02");
  simgrid::s4u::Engine::set_config("network/crosstraffic:0");
  simgrid::s4u::Engine::set_config("network/TCP-gamma:0");
  return engine;
}

}  // namespace memtwin::sim
