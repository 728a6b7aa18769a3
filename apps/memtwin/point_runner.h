#pragma once
// Running many variants of one scenario, each as its own `memtwin run` process (SimGrid runs one
// simulation per process), a few at a time. Shared by `memtwin sweep` and `memtwin plan`.
#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

namespace memtwin::cli {

/// The points of a grid: every combination of the --grid axes, the --zip axes varying together.
/// Each point is a list of "key=value" overrides; `keys` names the varied keys in order.
struct Grid {
  std::vector<std::string> keys;
  std::vector<std::vector<std::string>> points;
};
Grid expand_grid(const std::vector<std::string>& grid_specs, const std::vector<std::string>& zip_specs);

/// A directory of the temporary area for the runs' captured output, named PREFIX-PID, removed with
/// everything in it when this goes out of scope.
struct ScratchDirectory {
  explicit ScratchDirectory(const std::string& prefix)
      : path(std::filesystem::temp_directory_path() / (prefix + "-" + std::to_string(::getpid()))) {}
  ~ScratchDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;
  std::filesystem::path path;
};

struct PointOutcome {
  std::size_t index = 0;
  int exit_code = 0;
  std::string out, err;  ///< the run's stdout (its JSON) and stderr
};

/// Runs points[i] for every i in `todo`, `jobs` at once, calling `on_done` in completion order.
void run_points(const std::string& scenario, const std::string& backend, const std::vector<std::string>& common,
                const std::vector<std::vector<std::string>>& points, const std::vector<std::size_t>& todo, int jobs,
                const std::filesystem::path& scratch, const std::function<void(const PointOutcome&)>& on_done);

}  // namespace memtwin::cli
