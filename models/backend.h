#pragma once
// A backend turns a Scenario into a RunResult: `analytic` (closed forms, in models/), `sim`
// (SimGrid, in sim/), `hw` (real devices, in hw/). The CLI picks one by name from an explicit
// registry it builds itself, so no static self-registration is needed.
#include <memory>
#include <stdexcept>
#include <string>

#include "models/progress.h"
#include "models/result.h"
#include "models/scenario.h"

namespace memtwin {

/// A backend cannot run this scenario (a capability it does not have yet, or a scenario without
/// what it needs). The CLI reports it as bad input (exit 2), naming the alternative.
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Backend {
 public:
  virtual ~Backend() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  /// One-line description for `memtwin run --help`.
  [[nodiscard]] virtual std::string summary() const = 0;
  /// Runs the scenario. Running out of memory is a result (fits = false), not an exception;
  /// exceptions mean the backend could not run at all.
  virtual RunResult run(const Scenario& scenario) = 0;
  /// Where the next runs report how far they are (null: nowhere). Backends that report nothing ignore it.
  void report_progress_to(Progress* progress) { progress_ = progress; }

 protected:
  Progress* progress_ = nullptr;
};

}  // namespace memtwin
