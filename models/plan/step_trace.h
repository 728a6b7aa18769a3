#pragma once
// The outputs of a training step for people and tools, simulated or measured: a Chrome/Perfetto
// trace (a process per rank, a thread per stream named as the plan names them, device memory as a
// counter track; opens in ui.perfetto.dev) and the memory timeline as CSV. Both backends write
// them with these functions, so a simulated and a measured step open side by side with the same
// tracks.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/plan/plan.h"

namespace memtwin {

struct StepTraceEvent {
  int rank = 0;
  Stream stream = Stream::compute;
  std::string name;
  double start_s = 0, end_s = 0;
};

/// (time in the step, bytes of device memory in use) of rank 0.
using MemoryTimeline = std::vector<std::pair<double, std::int64_t>>;

std::string perfetto_step_trace(const std::vector<StepTraceEvent>& events, const MemoryTimeline& memory);
std::string memory_timeline_csv(const MemoryTimeline& memory);

}  // namespace memtwin
