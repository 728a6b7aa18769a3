#include "models/plan/step_trace.h"

#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

namespace memtwin {

std::string perfetto_step_trace(const std::vector<StepTraceEvent>& step_events, const MemoryTimeline& memory) {
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  std::map<int, bool> named;
  for (const auto& e : step_events) {
    if (!named[e.rank]) {
      named[e.rank] = true;
      events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", e.rank}, {"args", {{"name", "rank " + std::to_string(e.rank)}}}});
      for (Stream s : {Stream::compute, Stream::comm, Stream::copy, Stream::send_next, Stream::send_prev, Stream::recv_next,
                       Stream::recv_prev, Stream::context}) {
        events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", e.rank}, {"tid", static_cast<int>(s)},
                          {"args", {{"name", stream_name(s)}}}});
      }
    }
    events.push_back({{"name", e.name}, {"cat", stream_name(e.stream)}, {"ph", "X"}, {"pid", e.rank},
                      {"tid", static_cast<int>(e.stream)}, {"ts", e.start_s * 1e6}, {"dur", (e.end_s - e.start_s) * 1e6}});
  }
  for (const auto& [t, bytes] : memory) {
    events.push_back({{"name", "device memory"}, {"ph", "C"}, {"pid", 0}, {"ts", t * 1e6}, {"args", {{"bytes", bytes}}}});
  }
  nlohmann::ordered_json doc;
  doc["traceEvents"] = events;
  doc["displayTimeUnit"] = "ms";
  return doc.dump();
}

std::string memory_timeline_csv(const MemoryTimeline& memory) {
  std::ostringstream out;
  out << "time_s,rank,bytes_in_use\n";
  out.precision(9);
  for (const auto& [t, bytes] : memory) out << t << ",0," << bytes << "\n";
  return out.str();
}

}  // namespace memtwin
