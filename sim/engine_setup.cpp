#include "sim/engine_setup.h"

#include <fstream>

#include <xbt/log.h>

namespace memtwin::sim {

long max_memory_maps() {
  std::ifstream in("/proc/sys/vm/max_map_count");
  long value = 0;
  return (in >> value && value > 0) ? value : 65530;
}

std::unique_ptr<simgrid::s4u::Engine> make_engine(bool guard_pages) {
  static char name[] = "memtwin";
#ifdef MEMTWIN_SANITIZED
  // SimGrid's raw contexts switch stacks behind AddressSanitizer's back (Debian's SimGrid is built
  // without its fiber annotations); threads it can follow. The factory is chosen as the engine starts.
  static char factory[] = "--cfg=contexts/factory:thread";
  static char* argv[] = {name, factory, nullptr};
  static int argc = 2;
#else
  static char* argv[] = {name, nullptr};
  static int argc = 1;
#endif
  xbt_log_control_set("root.thres:critical");
  auto engine = std::make_unique<simgrid::s4u::Engine>(&argc, argv);
  simgrid::s4u::Engine::set_config("network/model:CM02");
  simgrid::s4u::Engine::set_config("network/crosstraffic:0");
  simgrid::s4u::Engine::set_config("network/TCP-gamma:0");
  if (!guard_pages) simgrid::s4u::Engine::set_config("contexts/guard-size:0");
  return engine;
}

}  // namespace memtwin::sim
