#include "apps/memtwin/terminal_progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>

extern char** environ;

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

constexpr auto kRedrawEvery = std::chrono::milliseconds(200);
constexpr const char* kSetting = "MEMTWIN_PROGRESS";

}  // namespace

std::string progress_text(std::uint64_t done, std::uint64_t total, const char* what, double elapsed_s) {
  const int percent = total == 0 ? 100 : static_cast<int>(100 * std::min(done, total) / total);
  std::string text = std::to_string(percent) + "% of " + with_thousands(total) + " " + what + ", " +
                     std::to_string(static_cast<long long>(elapsed_s)) + " s";
  if (done > 0 && done < total && elapsed_s >= 1) {
    const double left = elapsed_s / static_cast<double>(done) * static_cast<double>(total - done);
    text += ", about " + std::to_string(static_cast<long long>(std::ceil(left))) + " s left";
  }
  return text;
}

TerminalProgress::TerminalProgress(std::ostream& out, bool enabled, std::chrono::milliseconds delay, Clock clock,
                                   std::uint64_t reports_per_clock_read)
    : out_(out), enabled_(enabled), delay_(delay), clock_(std::move(clock)),
      reports_per_clock_read_(std::max<std::uint64_t>(1, reports_per_clock_read)) {
  if (enabled_) start_ = last_drawn_ = clock_();
}

TerminalProgress TerminalProgress::for_stderr(std::uint64_t reports_per_clock_read) {
  const char* setting = std::getenv(kSetting);
  std::string choice = setting ? setting : "auto";
  if (choice != "auto" && choice != "always" && choice != "never") {
    std::cerr << "memtwin: " << kSetting << "=" << choice << ": expected auto, always or never; using auto\n";
    choice = "auto";
  }
  const char* term = std::getenv("TERM");
  const bool terminal = isatty(STDERR_FILENO) == 1 && !(term && std::strcmp(term, "dumb") == 0);
  const bool always = choice == "always";
  return TerminalProgress(std::cerr, always || (choice != "never" && terminal),
                          always ? std::chrono::milliseconds(0) : kProgressDelay,
                          std::chrono::steady_clock::now, reports_per_clock_read);
}

std::vector<std::string> TerminalProgress::quiet_child_environment() {
  std::vector<std::string> env;
  const std::string prefix = std::string(kSetting) + "=";
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, prefix.c_str(), prefix.size()) != 0) env.emplace_back(*e);
  env.push_back(prefix + "never");
  return env;
}

TerminalProgress::~TerminalProgress() { clear(); }

void TerminalProgress::report(std::uint64_t done, std::uint64_t total, const char* what) {
  if (!enabled_ || (++reports_ % reports_per_clock_read_ != 0 && done != total)) return;
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
