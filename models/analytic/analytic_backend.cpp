#include "models/analytic/analytic_backend.h"

#include "models/analytic/communication_time.h"
#include "models/analytic/memory_report.h"
#include "models/analytic/model_report.h"
#include "models/memory/communication.h"
#include "models/plan/training_plan.h"

namespace memtwin {
namespace {

// Each collective of the step alone on idle links (the collective model), summed; the plan decides
// which collectives a step issues. Scenarios the plan cannot express keep the volumes alone.
void add_communication_time(RunResult& result, const Scenario& scenario) {
  if (!scenario.model.architecture_known) return;
  try {
    const Plan plan = build_training_plan(scenario);
    const CommunicationTime t = communication_time(scenario, plan);
    auto& out = result.metrics["communication"]["time_s"];
    for (const auto& [kind, seconds] : t.seconds) out[kind] = seconds;
    result.metrics["communication"]["calls"] = t.calls;
    result.metrics["communication"]["priced_as"] = t.basis;
  } catch (const PlanUnsupported& e) {
    result.notes.push_back(std::string("communication time not estimated: ") + e.what());
  }
}

class AnalyticBackend final : public Backend {
 public:
  std::string name() const override { return "analytic"; }
  std::string summary() const override { return "closed-form estimates, no simulation (instant)"; }
  RunResult run(const Scenario& scenario) override {
    RunResult result;
    result.backend = name();
    result.metrics["model"] = model_report(scenario);
    if (scenario.training) {
      const TrainingMemory memory = training_memory(scenario);
      add_training_memory(result.metrics, result.notes, scenario, memory);
      result.fits = memory.fits();
      const DataParallelTraffic traffic = data_parallel_traffic(scenario);
      result.metrics["communication"]["bytes_per_gpu"] = {{"all_gather", traffic.all_gather_bytes},
                                                          {"reduce_scatter", traffic.reduce_scatter_bytes},
                                                          {"all_reduce", traffic.all_reduce_bytes},
                                                          {"total", traffic.total()},
                                                          {"cross_host", traffic.cross_host_bytes}};
      add_communication_time(result, scenario);
    } else {
      const ServingMemory memory = serving_memory(scenario);
      add_serving_memory(result.metrics, result.notes, scenario, memory);
      result.fits = memory.fits;
    }
    return result;
  }
};

}  // namespace

std::unique_ptr<Backend> make_analytic_backend() { return std::make_unique<AnalyticBackend>(); }

}  // namespace memtwin
