#include "apps/memtwin/point_runner.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "apps/memtwin/commands.h"
#include "apps/memtwin/terminal_progress.h"

namespace fs = std::filesystem;

namespace memtwin::cli {
namespace {

// "LO..HI" doubles from LO up to HI (GPU counts and parallel degrees are searched in powers of
// two); "LO..HI:STEP" counts up by STEP. Anything else (a file path with "..", too) is one value.
std::vector<std::string> expand_integer_range(const std::string& value, const std::string& spec) {
  static const std::regex range(R"((\d+)\.\.(\d+)(?::(\d+))?)");
  std::smatch m;
  if (!std::regex_match(value, m, range)) return {value};
  const long long lo = std::stoll(m[1]), hi = std::stoll(m[2]);
  const long long step = m[3].matched ? std::stoll(m[3]) : 0;
  if (lo > hi || (!m[3].matched && lo == 0) || (m[3].matched && step == 0))
    throw UsageError("'" + value + "' in '" + spec + "': a range is LO..HI with 0 < LO <= HI (doubling) or LO..HI:STEP with STEP > 0");
  std::vector<std::string> out;
  for (long long v = lo; v <= hi; v = step ? v + step : v * 2) {
    out.push_back(std::to_string(v));
    if (out.size() > 100000) throw UsageError("'" + value + "' in '" + spec + "' expands to too many values");
  }
  return out;
}

std::pair<std::string, std::vector<std::string>> parse_axis(const std::string& spec) {
  const auto eq = spec.find('=');
  if (eq == std::string::npos || eq == 0) throw UsageError("expected KEY=V1,V2,... in '" + spec + "'");
  std::vector<std::string> values;
  std::stringstream ss(spec.substr(eq + 1));
  for (std::string v; std::getline(ss, v, ',');) {
    auto range = expand_integer_range(v, spec);
    values.insert(values.end(), range.begin(), range.end());
  }
  if (values.empty()) throw UsageError("no values in '" + spec + "'");
  return {spec.substr(0, eq), values};
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Grid expand_grid(const std::vector<std::string>& grid_specs, const std::vector<std::string>& zip_specs) {
  struct Dimension {
    std::vector<std::string> keys;
    std::vector<std::vector<std::string>> values;  // per position: one value per key
  };
  std::vector<Dimension> dims;
  for (const auto& spec : grid_specs) {
    auto [key, values] = parse_axis(spec);
    Dimension d{{key}, {}};
    for (const auto& v : values) d.values.push_back({v});
    dims.push_back(d);
  }
  if (!zip_specs.empty()) {
    Dimension z;
    for (const auto& spec : zip_specs) {
      auto [key, values] = parse_axis(spec);
      if (!z.keys.empty() && values.size() != z.values.size()) throw UsageError("--zip lists must have the same length");
      if (z.keys.empty()) z.values.resize(values.size());
      z.keys.push_back(key);
      for (std::size_t i = 0; i < values.size(); ++i) z.values[i].push_back(values[i]);
    }
    dims.push_back(z);
  }
  Grid grid;
  grid.points = {{}};
  for (const auto& d : dims) {
    grid.keys.insert(grid.keys.end(), d.keys.begin(), d.keys.end());
    std::vector<std::vector<std::string>> next;  // the last dimension varies fastest
    for (const auto& p : grid.points) {
      for (const auto& values : d.values) {
        auto q = p;
        for (std::size_t k = 0; k < d.keys.size(); ++k) q.push_back(d.keys[k] + "=" + values[k]);
        next.push_back(q);
      }
    }
    grid.points = next;
  }
  return grid;
}

void run_points(const std::string& scenario, const std::string& backend, const std::vector<std::string>& common,
                const std::vector<std::vector<std::string>>& points, const std::vector<std::size_t>& todo, int jobs,
                const fs::path& scratch, const std::function<void(const PointOutcome&)>& on_done) {
  fs::create_directories(scratch);
  const std::string self = fs::canonical("/proc/self/exe").string();
  std::map<pid_t, std::size_t> running;
  std::size_t next = 0, finished = 0;
  TerminalProgress progress = TerminalProgress::for_stderr(1);
  std::vector<std::string> env_s = TerminalProgress::quiet_child_environment();
  std::vector<char*> env;
  for (auto& e : env_s) env.push_back(e.data());
  env.push_back(nullptr);
  auto file = [&](std::size_t index, const char* kind) {
    return scratch / ("point" + std::to_string(index) + "." + kind);
  };
  auto launch = [&](std::size_t index) {
    std::vector<std::string> argv_s = {self, "run", scenario, "--json", "--backend", backend};
    for (const auto& s : common) argv_s.insert(argv_s.end(), {"--set", s});
    for (const auto& s : points[index]) argv_s.insert(argv_s.end(), {"--set", s});
    std::vector<char*> argv;
    for (auto& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, file(index, "out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, file(index, "err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    const int failed = posix_spawn(&pid, self.c_str(), &actions, nullptr, argv.data(), env.data());
    posix_spawn_file_actions_destroy(&actions);
    if (failed) throw std::runtime_error("cannot start " + self);
    running[pid] = index;
  };
  while (next < todo.size() || !running.empty()) {
    while (next < todo.size() && static_cast<int>(running.size()) < std::max(1, jobs)) launch(todo[next++]);
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) break;
    auto it = running.find(pid);
    if (it == running.end()) continue;
    PointOutcome outcome;
    outcome.index = it->second;
    outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    outcome.out = slurp(file(outcome.index, "out"));
    outcome.err = slurp(file(outcome.index, "err"));
    fs::remove(file(outcome.index, "out"));
    fs::remove(file(outcome.index, "err"));
    running.erase(it);
    on_done(outcome);
    progress.report(++finished, todo.size(), "points");
  }
}

}  // namespace memtwin::cli
