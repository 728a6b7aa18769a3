#include "apps/memtwin/terminal_progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>

namespace memtwin {
namespace {

std::string with_thousands(std::uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

constexpr std::uint64_t kReportsPerClockRead = 1024;
constexpr auto kRedrawEvery = std::chrono::milliseconds(200);

}  // namespace

std::string progress_text(std::uint64_t done, std::uint64_t total, const char* what, double elapsed_s) {
  const int percent = total == 0 ? 100 : static_cast<int>(100 * std::min(done, total) / total);
  return std::to_string(percent) + "% of " + with_thousands(total) + " " + what + ", " +
         std::to_string(static_cast<long long>(elapsed_s)) + " s";
}

TerminalProgress::TerminalProgress(std::ostream& out, bool enabled, std::chrono::milliseconds delay, Clock clock)
    : out_(out), enabled_(enabled), delay_(delay), clock_(std::move(clock)) {
  if (enabled_) start_ = last_drawn_ = clock_();
}

TerminalProgress TerminalProgress::for_stderr() {
  const char* setting = std::getenv("MEMTWIN_PROGRESS");
  const std::string choice = setting ? setting : "auto";
  if (choice == "always") return TerminalProgress(std::cerr, true, std::chrono::milliseconds(0));
  if (choice == "never") return TerminalProgress(std::cerr, false);
  const char* term = std::getenv("TERM");
  const bool terminal = isatty(STDERR_FILENO) == 1 && !(term && std::strcmp(term, "dumb") == 0);
  return TerminalProgress(std::cerr, terminal);
}

TerminalProgress::~TerminalProgress() { clear(); }

void TerminalProgress::report(std::uint64_t done, std::uint64_t total, const char* what) {
  if (!enabled_ || (++reports_ % kReportsPerClockRead != 0 && done != total)) return;
  const auto now = clock_();
  if (now - start_ < delay_ || (drawn_ && now - last_drawn_ < kRedrawEvery && done != total)) return;
  last_drawn_ = now;
  drawn_ = true;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  out_ << "\r\033[Kmemtwin: " << progress_text(done, total, what, elapsed) << std::flush;
}

void TerminalProgress::clear() {
  if (!drawn_) return;
  out_ << "\r\033[K" << std::flush;
  drawn_ = false;
}

}  // namespace memtwin
