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
  static int argc = 1;
  static char name[] = "memtwin";
  static char* argv[] = {name, nullptr};
  xbt_log_control_set("root.thres:critical");
  auto engine = std::make_unique<simgrid::s4u::Engine>(&argc, argv);
  simgrid::s4u::Engine::set_config("network/model:CM02");
  simgrid::s4u::Engine::set_config("network/crosstraffic:0");
  simgrid::s4u::Engine::set_config("network/TCP-gamma:0");
  if (!guard_pages) simgrid::s4u::Engine::set_config("contexts/guard-size:0");
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
  // SimGrid's raw contexts switch stacks behind AddressSanitizer's back (Debian's SimGrid is built
  // without its fiber annotations); threads it can follow.
  simgrid::s4u::Engine::set_config("contexts/factory:thread");
#endif
#endif
  return engine;
}

}  // namespace memtwin::sim
