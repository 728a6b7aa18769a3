#pragma once
// The SimGrid engine as memtwin configures it: quiet logging and a plain, physical network model —
// max-min sharing (CM02) without TCP's window bound or cross-traffic, so links deliver their
// nominal bandwidth and any calibration is ours. One engine per process (ARCHITECTURE.md §5).
#include <memory>

#include <simgrid/s4u.hpp>

namespace memtwin::sim {

std::unique_ptr<simgrid::s4u::Engine> make_engine();

}  // namespace memtwin::sim
