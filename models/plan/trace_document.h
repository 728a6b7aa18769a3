#pragma once
// A Chrome/Perfetto trace document, {"traceEvents": [...], "displayTimeUnit": "ms"}, written event by
// event: the same bytes as building the whole document as one nlohmann::ordered_json and dumping
// it, while only one event at a time is a JSON value (held all at once, the events of a long step's
// trace took about 2 KB each: 3.3 GB for a 3,200-layer model's 1.8 M events).
#include <cstddef>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace memtwin {

class TraceDocument {
 public:
  void add(const nlohmann::ordered_json& event) {
    text_ += events_ == 0 ? "{\"traceEvents\":[" : ",";
    text_ += event.dump();
    ++events_;
  }
  [[nodiscard]] std::size_t events() const { return events_; }
  /// The document (compact JSON, as nlohmann's dump() writes it).
  [[nodiscard]] std::string finish() && {
    if (events_ == 0) text_ = "{\"traceEvents\":[";
    text_ += "],\"displayTimeUnit\":\"ms\"}";
    return std::move(text_);
  }

 private:
  std::string text_;
  std::size_t events_ = 0;
};

}  // namespace memtwin
