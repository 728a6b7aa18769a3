#pragma once
// The memtwin subcommands. Each takes its own arguments (after the subcommand name) and returns
// the process exit code: 0 ok, 2 bad input, 3 the scenario does not fit in memory, 1 internal error.
#include <stdexcept>
#include <string>
#include <vector>

#include "models/scenario.h"

namespace memtwin::cli {

enum ExitCode { kOk = 0, kInternalError = 1, kBadInput = 2, kDoesNotFit = 3 };

using Args = std::vector<std::string>;

int cmd_run(const Args& args);
int cmd_check(const Args& args);
int cmd_schema(const Args& args);
int cmd_models(const Args& args);
int cmd_gpus(const Args& args);
int cmd_fit(const Args& args);
int cmd_kernels(const Args& args);
int cmd_sweep(const Args& args);
int cmd_report(const Args& args);
int cmd_plan(const Args& args);
int cmd_calibrate(const Args& args);
int cmd_validate(const Args& args);
int cmd_compare(const Args& args);
int cmd_quality(const Args& args);

/// Thrown for a malformed command line; main prints it with the subcommand's usage and exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A scenario of jobs (`jobs:`) runs with `memtwin run` on the simulator only: `what` (another
/// command, or run with another backend or option) says so rather than run it as one workload.
inline void refuse_jobs(const Scenario& s, const std::string& what) {
  if (!s.jobs.empty()) {
    throw UsageError("'" + s.name + "' is a scenario of jobs (jobs:), which only `memtwin run` simulates (on the simulator, "
                     "the jobs together); " + what + " takes one of the jobs' own scenario files");
  }
}

}  // namespace memtwin::cli
