#include "apps/memtwin/backends.h"

#include "apps/memtwin/commands.h"
#include "models/analytic/analytic_backend.h"
#include "sim/sim_backend.h"

namespace memtwin::cli {

std::vector<std::string> backend_names() { return {"auto", "analytic", "sim", "hw"}; }

std::string default_backend() { return "auto"; }

std::string resolve_backend(const std::string& name, const Scenario& scenario) {
  if (name != "auto") return name;
  (void)scenario;
  return "sim";  // the simulator covers training steps and serving runs
}

std::unique_ptr<Backend> make_backend(const std::string& name, const HwOptions& hw) {
  if (name == "analytic") return make_analytic_backend();
  if (name == "sim") return make_sim_backend();
  if (name == "hw") return make_hw_backend(hw);
  std::string known;
  for (const auto& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
  throw UsageError("unknown backend '" + name + "'; available: " + known);
}

}  // namespace memtwin::cli
