#pragma once
// The explicit registry of backends the CLI can run.
#include <memory>
#include <string>
#include <vector>

#include "models/backend.h"
#include "models/scenario.h"

namespace memtwin::cli {

std::vector<std::string> backend_names();
/// The backend called `name`; throws UsageError naming the known ones otherwise.
std::unique_ptr<Backend> make_backend(const std::string& name);
std::string default_backend();
/// "auto" picks the simulator for training and the analytic model for serving; others pass through.
std::string resolve_backend(const std::string& name, const Scenario& scenario);

}  // namespace memtwin::cli
