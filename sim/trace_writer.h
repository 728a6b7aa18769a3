#pragma once
// Outputs of a simulated step for people and tools: a Chrome/Perfetto trace (one process per
// rank, one thread per stream, memory as a counter track; opens in ui.perfetto.dev) and the memory
// timeline as CSV. Track names are shared with the hardware backend's traces.
#include <string>

#include "sim/step_simulation.h"

namespace memtwin::sim {

std::string perfetto_trace(const StepSimulation& step);
std::string timeline_csv(const StepSimulation& step);

}  // namespace memtwin::sim
