#pragma once
// How far a long run is, for whoever shows it (the command line draws a line on a terminal). A
// backend reports counts it has anyway (requests finished, plan ops completed); a sink only reads
// them, so a run's results are the same with a sink or without one.
#include <cstdint>

namespace memtwin {

class Progress {
 public:
  virtual ~Progress() = default;
  /// `done` of `total` units of `what` ("requests", "ops"); called often, so a sink keeps it cheap.
  virtual void report(std::uint64_t done, std::uint64_t total, const char* what) = 0;
};

}  // namespace memtwin
