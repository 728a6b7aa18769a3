#pragma once
// The explicit registry of backends the CLI can run.
#include <memory>
#include <string>
#include <vector>

#include "hw/hw_backend.h"
#include "models/backend.h"
#include "models/scenario.h"

namespace memtwin::cli {

std::vector<std::string> backend_names();
/// The backend called `name`; throws UsageError naming the known ones otherwise. `hw` options
/// apply to the hardware backend only.
std::unique_ptr<Backend> make_backend(const std::string& name, const HwOptions& hw = {});
std::string default_backend();
/// "auto" picks the simulator for training and the analytic model for serving; others pass through.
std::string resolve_backend(const std::string& name, const Scenario& scenario);

}  // namespace memtwin::cli
