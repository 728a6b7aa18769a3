#pragma once
// The SimGrid engine as memtwin configures it: quiet logging and a plain, physical network model —
// max-min sharing (CM02) without TCP's window bound or cross-traffic, so links deliver their
// nominal bandwidth and any calibration is ours. One engine per process (ARCHITECTURE.md §5).
#include <memory>

#include <simgrid/s4u.hpp>

namespace memtwin::sim {

/// `guard_pages`: SimGrid's stack guard pages (each costs an extra memory mapping per actor); a
/// simulation with very many actors turns them off to stay under vm.max_map_count.
std::unique_ptr<simgrid::s4u::Engine> make_engine(bool guard_pages = true);

/// The kernel's limit on memory mappings per process (vm.max_map_count; 65530 if unreadable).
long max_memory_maps();

}  // namespace memtwin::sim
