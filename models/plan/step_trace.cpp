#include "models/plan/step_trace.h"

#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "models/plan/trace_document.h"

namespace memtwin {

std::string perfetto_step_trace(const std::vector<StepTraceEvent>& step_events, const MemoryTimeline& memory) {
  TraceDocument events;
  std::map<int, bool> named;
  for (const auto& e : step_events) {
    if (!named[e.rank]) {
      named[e.rank] = true;
      events.add({{"name", "process_name"}, {"ph", "M"}, {"pid", e.rank}, {"args", {{"name", "rank " + std::to_string(e.rank)}}}});
      for (Stream s : {Stream::compute, Stream::comm, Stream::copy, Stream::send_next, Stream::send_prev, Stream::recv_next,
                       Stream::recv_prev, Stream::context}) {
        events.add({{"name", "thread_name"}, {"ph", "M"}, {"pid", e.rank}, {"tid", static_cast<int>(s)},
                    {"args", {{"name", stream_name(s)}}}});
      }
    }
    events.add({{"name", e.name}, {"cat", stream_name(e.stream)}, {"ph", "X"}, {"pid", e.rank},
                {"tid", static_cast<int>(e.stream)}, {"ts", e.start_s * 1e6}, {"dur", (e.end_s - e.start_s) * 1e6}});
  }
  for (const auto& [t, bytes] : memory) {
    events.add({{"name", "device memory"}, {"ph", "C"}, {"pid", 0}, {"ts", t * 1e6}, {"args", {{"bytes", bytes}}}});
  }
  return std::move(events).finish();
}

std::string memory_timeline_csv(const MemoryTimeline& memory) {
  std::ostringstream out;
  out << "time_s,rank,bytes_in_use\n";
  out.precision(9);
  for (const auto& [t, bytes] : memory) out << t << ",0," << bytes << "\n";
  return out.str();
}

}  // namespace memtwin
