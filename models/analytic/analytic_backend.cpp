#include "models/analytic/analytic_backend.h"

#include "models/analytic/model_report.h"

namespace memtwin {
namespace {

class AnalyticBackend final : public Backend {
 public:
  std::string name() const override { return "analytic"; }
  std::string summary() const override { return "closed-form estimates, no simulation (instant)"; }
  RunResult run(const Scenario& scenario) override {
    RunResult result;
    result.backend = name();
    result.metrics["model"] = model_report(scenario);
    return result;
  }
};

}  // namespace

std::unique_ptr<Backend> make_analytic_backend() { return std::make_unique<AnalyticBackend>(); }

}  // namespace memtwin
