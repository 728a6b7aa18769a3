// The backends of memtwin-device: the hardware and the analytic model; the simulator lives in the
// full memtwin binary (it needs SimGrid).
#include "apps/memtwin/backends.h"

#include "apps/memtwin/commands.h"
#include "models/analytic/analytic_backend.h"

namespace memtwin::cli {

std::vector<std::string> backend_names() { return {"auto", "analytic", "hw"}; }

std::string default_backend() { return "auto"; }

std::string resolve_backend(const std::string& name, const Scenario& scenario) {
  (void)scenario;
  return name == "auto" ? "hw" : name;  // this binary exists to measure
}

std::unique_ptr<Backend> make_backend(const std::string& name, const HwOptions& hw) {
  if (name == "analytic") return make_analytic_backend();
  if (name == "hw") return make_hw_backend(hw);
  if (name == "sim") throw UsageError("memtwin-device has no simulator (it is built without SimGrid); run --backend sim with memtwin");
  throw UsageError("unknown backend '" + name + "'; available: auto (hw), analytic, hw");
}

}  // namespace memtwin::cli
