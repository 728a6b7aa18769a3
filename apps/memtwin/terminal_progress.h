#pragma once
// The progress line of a long run on a terminal: "memtwin: 41% of 100,000 requests, 6 s, about 9 s
// left", redrawn in place on stderr, shown only once a run has taken `delay` (a quick run prints
// nothing) and only where stderr is a terminal (a pipe or a file gets no carriage returns). A
// simulation's reports cost a counter increment (the clock is read every `reports_per_clock_read`th);
// a sweep's points, each a process, read it every time.
#include <chrono>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "models/progress.h"

namespace memtwin {

/// How long a run goes before its line appears.
inline constexpr std::chrono::milliseconds kProgressDelay{2000};

class TerminalProgress final : public Progress {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  /// Draws on `out` if `enabled`; `clock` is the time source (tests give their own).
  TerminalProgress(std::ostream& out, bool enabled, std::chrono::milliseconds delay = kProgressDelay,
                   Clock clock = std::chrono::steady_clock::now, std::uint64_t reports_per_clock_read = 1024);
  /// On stderr when it is a terminal (and TERM is not "dumb"); the environment variable
  /// MEMTWIN_PROGRESS=never turns it off, =always draws from the start wherever stderr goes (any
  /// other value is reported on stderr and taken as auto).
  static TerminalProgress for_stderr(std::uint64_t reports_per_clock_read = 1024);
  /// The environment a child process of this one runs in: this one's, with its progress line off
  /// (its stderr is captured; the parent draws the line).
  static std::vector<std::string> quiet_child_environment();
  /// Takes the line away.
  ~TerminalProgress() override;
  TerminalProgress(const TerminalProgress&) = delete;
  TerminalProgress& operator=(const TerminalProgress&) = delete;

  void report(std::uint64_t done, std::uint64_t total, const char* what) override;
  /// Clears the line if one is drawn (before the run's own output).
  void clear();

 private:
  std::ostream& out_;
  bool enabled_;
  std::chrono::milliseconds delay_;
  Clock clock_;
  std::uint64_t reports_per_clock_read_;
  std::chrono::steady_clock::time_point start_, last_drawn_;
  std::uint64_t reports_ = 0;
  bool drawn_ = false;
};

/// "41% of 100,000 requests, 6 s, about 9 s left": the line's text (the time left from the pace so
/// far, once a second has passed and while some are left).
std::string progress_text(std::uint64_t done, std::uint64_t total, const char* what, double elapsed_s);

}  // namespace memtwin
