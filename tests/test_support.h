#pragma once
// Helpers shared by the tests: paths into the source tree and running the memtwin binary.
#include <string>
#include <vector>

namespace memtwin::test {

/// Absolute path of a file in the source tree ("scenarios/quickstart.yaml").
std::string source_path(const std::string& relative);

/// Every file with the extension under a source-tree folder, sorted.
std::vector<std::string> files_under(const std::string& relative_dir, const std::string& extension);

struct ProcessResult {
  int exit_code = -1;
  std::string out;  ///< stdout
  std::string err;  ///< stderr
};

/// Runs the memtwin binary with `args` (shell-quoted here) and captures its output.
ProcessResult run_memtwin(const std::vector<std::string>& args);
/// The same with memtwin-device (the measuring binary built without SimGrid).
ProcessResult run_memtwin_device(const std::vector<std::string>& args);
/// Any binary.
ProcessResult run_binary(const std::string& binary, const std::vector<std::string>& args);

/// One row of a run directory's link_utilization.csv.
struct LinkUtilizationRow {
  double time_s = 0;
  std::string link, direction;
  double utilization = 0, bytes = 0;
};
/// Its rows, in order; throws std::runtime_error when the file is missing or its header is not the
/// documented one.
std::vector<LinkUtilizationRow> read_link_utilization(const std::string& path);

}  // namespace memtwin::test
