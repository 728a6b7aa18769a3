// memtwin sweep: run a scenario over a grid of overrides, in parallel processes (SimGrid runs one
// simulation per process anyway), appending one line per finished point so that a killed sweep
// loses nothing and `--resume` repeats nothing.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/memtwin/commands.h"
#include "apps/memtwin/options.h"
#include "models/scenario_loader.h"

extern char** environ;

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace memtwin::cli {
namespace {

struct Dimension {
  std::vector<std::string> keys;                 // one key, or the keys of a --zip group
  std::vector<std::vector<std::string>> values;  // per position: one value per key
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, sep);) out.push_back(part);
  return out;
}

std::pair<std::string, std::vector<std::string>> parse_axis(const std::string& spec) {
  const auto eq = spec.find('=');
  if (eq == std::string::npos || eq == 0) throw UsageError("expected KEY=V1,V2,... in '" + spec + "'");
  auto values = split(spec.substr(eq + 1), ',');
  if (values.empty()) throw UsageError("no values in '" + spec + "'");
  return {spec.substr(0, eq), values};
}

// The metrics worth a column in points.csv, when the result has them.
const std::vector<std::string> kColumns = {"memory.gpu.fits", "memory.gpu.peak_bytes", "time.step_s", "time.mfu",
                                           "time.tokens_per_s", "latency_s.ttft.p99", "latency_s.tpot.p99",
                                           "throughput.requests_per_s", "kv_cache.capacity_tokens"};

std::string lookup(const nlohmann::json& doc, const std::string& path) {
  const nlohmann::json* node = &doc;
  for (const auto& part : split(path, '.')) {
    if (!node->is_object() || !node->contains(part)) return "";
    node = &(*node)[part];
  }
  return node->is_string() ? node->get<std::string>() : node->dump();
}

std::string csv_cell(std::string s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace

int cmd_sweep(const Args& args) {
  po::options_description options("options");
  po::positional_options_description positional;
  options.add_options()
      ("scenario", po::value<std::string>(), "scenario YAML file")
      ("grid", po::value<std::vector<std::string>>()->composing(), "KEY=V1,V2,... (repeatable; cartesian product)")
      ("zip", po::value<std::vector<std::string>>()->composing(), "KEY=V1,V2,... varied together with the other --zip keys")
      ("set", po::value<std::vector<std::string>>()->composing(), "override applied to every point")
      ("jobs,j", po::value<int>()->default_value(1), "points run at once")
      ("backend", po::value<std::string>()->default_value("auto"), "backend for every point")
      ("out", po::value<std::string>(), "directory for points.jsonl and points.csv (required)")
      ("resume", po::bool_switch(), "skip the points already in DIR/points.jsonl");
  positional.add("scenario", 1);
  auto vm = parse_args(args, options, positional,
                       "usage: memtwin sweep SCENARIO --grid KEY=V1,V2 [--grid ...] [--zip ...] [-j N] --out DIR [--resume]\n\n"
                       "Runs every combination of the overrides, N at a time, appending each finished point to\n"
                       "DIR/points.jsonl and DIR/points.csv. Invalid combinations are recorded with their error.");
  if (!vm) return kOk;
  if (!vm->count("scenario")) throw UsageError("a scenario file is required");
  if (!vm->count("out")) throw UsageError("--out DIR is required");
  const std::string scenario = (*vm)["scenario"].as<std::string>();
  std::vector<std::string> common;
  if (vm->count("set")) common = (*vm)["set"].as<std::vector<std::string>>();
  load_scenario_file(scenario, common);  // the base scenario must be valid

  std::vector<Dimension> dims;
  if (vm->count("grid")) {
    for (const auto& spec : (*vm)["grid"].as<std::vector<std::string>>()) {
      auto [key, values] = parse_axis(spec);
      Dimension d{{key}, {}};
      for (const auto& v : values) d.values.push_back({v});
      dims.push_back(d);
    }
  }
  if (vm->count("zip")) {
    Dimension z;
    for (const auto& spec : (*vm)["zip"].as<std::vector<std::string>>()) {
      auto [key, values] = parse_axis(spec);
      if (!z.keys.empty() && values.size() != z.values.size()) throw UsageError("--zip lists must have the same length");
      if (z.keys.empty()) z.values.resize(values.size());
      z.keys.push_back(key);
      for (std::size_t i = 0; i < values.size(); ++i) z.values[i].push_back(values[i]);
    }
    dims.push_back(z);
  }
  if (dims.empty()) throw UsageError("give at least one --grid or --zip");
  std::vector<std::string> keys;
  for (const auto& d : dims) keys.insert(keys.end(), d.keys.begin(), d.keys.end());

  // Every point, as its override strings, in a fixed order (the last dimension varies fastest).
  std::vector<std::vector<std::string>> points(1);
  for (const auto& d : dims) {
    std::vector<std::vector<std::string>> next;
    for (const auto& p : points) {
      for (const auto& values : d.values) {
        auto q = p;
        for (std::size_t k = 0; k < d.keys.size(); ++k) q.push_back(d.keys[k] + "=" + values[k]);
        next.push_back(q);
      }
    }
    points = next;
  }

  const fs::path dir = (*vm)["out"].as<std::string>();
  fs::create_directories(dir / "tmp");
  const fs::path jsonl = dir / "points.jsonl", csv = dir / "points.csv";
  // One CSV row per JSONL line, so both files can be rebuilt from the JSONL alone.
  auto csv_row = [&](const nlohmann::json& line) {
    std::ostringstream c;
    c << line["point"].get<std::size_t>() << "," << line["status"].get<std::string>();
    for (const auto& assignment : line["overrides"]) {
      const std::string a = assignment.get<std::string>();
      c << "," << csv_cell(a.substr(a.find('=') + 1));
    }
    const nlohmann::json result = line.value("result", nlohmann::json());
    for (const auto& col : kColumns) c << "," << csv_cell(result.is_null() ? "" : lookup(result, col));
    c << "," << csv_cell(line.value("error", "")) << "\n";
    return c.str();
  };
  std::vector<nlohmann::json> kept;
  if ((*vm)["resume"].as<bool>() && fs::exists(jsonl)) {
    std::ifstream in(jsonl);
    for (std::string line; std::getline(in, line);) {
      try {
        kept.push_back(nlohmann::json::parse(line));
      } catch (const std::exception&) {
        // a line cut short by a kill: the point runs again
      }
    }
  }
  std::set<std::string> done;
  {
    std::ofstream j(jsonl, std::ios::trunc);
    std::ofstream c(csv, std::ios::trunc);
    c << "point,status";
    for (const auto& k : keys) c << "," << csv_cell(k);
    for (const auto& col : kColumns) c << "," << col;
    c << ",error\n";
    for (const auto& line : kept) {
      done.insert(line["overrides"].dump());
      j << line.dump() << "\n";
      c << csv_row(line);
    }
  }

  std::vector<std::size_t> todo;
  for (std::size_t i = 0; i < points.size(); ++i) {
    nlohmann::json overrides = points[i];
    if (!done.count(overrides.dump())) todo.push_back(i);
  }
  const int jobs = std::max(1, (*vm)["jobs"].as<int>());
  const std::string self = fs::canonical("/proc/self/exe").string();
  std::map<pid_t, std::size_t> running;
  std::size_t next = 0, finished = 0;
  const auto start = std::chrono::steady_clock::now();

  auto launch = [&](std::size_t index) {
    std::vector<std::string> argv_s = {self, "run", scenario, "--json", "--backend", (*vm)["backend"].as<std::string>()};
    for (const auto& s : common) argv_s.insert(argv_s.end(), {"--set", s});
    for (const auto& s : points[index]) argv_s.insert(argv_s.end(), {"--set", s});
    std::vector<char*> argv;
    for (auto& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    const std::string out = (dir / "tmp" / ("point" + std::to_string(index) + ".out")).string();
    const std::string err = (dir / "tmp" / ("point" + std::to_string(index) + ".err")).string();
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    if (posix_spawn(&pid, self.c_str(), &actions, nullptr, argv.data(), environ) != 0) {
      throw std::runtime_error("cannot start " + self);
    }
    posix_spawn_file_actions_destroy(&actions);
    running[pid] = index;
  };

  auto record = [&](std::size_t index, int code) {
    const fs::path out = dir / "tmp" / ("point" + std::to_string(index) + ".out");
    const fs::path err = dir / "tmp" / ("point" + std::to_string(index) + ".err");
    std::ifstream o(out), e(err);
    std::stringstream out_text, err_text;
    out_text << o.rdbuf();
    err_text << e.rdbuf();
    nlohmann::json line;
    line["point"] = index;
    line["overrides"] = points[index];
    line["exit_code"] = code;
    line["status"] = code == 0 ? "ok" : code == 3 ? "does_not_fit" : code == 2 ? "invalid" : "error";
    nlohmann::json result;
    try {
      if (code == 0 || code == 3) result = nlohmann::json::parse(out_text.str());
    } catch (const std::exception&) {
      line["status"] = "error";
    }
    std::string message = err_text.str();
    while (!message.empty() && message.back() == '\n') message.pop_back();
    if (!result.is_null()) line["result"] = result;
    if (!message.empty() && code != 0 && code != 3) line["error"] = message;
    std::ofstream(jsonl, std::ios::app) << line.dump() << "\n";
    std::ofstream(csv, std::ios::app) << csv_row(line);
    fs::remove(out);
    fs::remove(err);
  };

  while (next < todo.size() || !running.empty()) {
    while (next < todo.size() && static_cast<int>(running.size()) < jobs) launch(todo[next++]);
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) break;
    auto it = running.find(pid);
    if (it == running.end()) continue;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    record(it->second, code);
    running.erase(it);
    ++finished;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double eta = elapsed / finished * (todo.size() - finished);
    std::fprintf(stderr, "\r[%zu/%zu] %.0f s elapsed, ETA %.0f s   ", finished + (points.size() - todo.size()),
                 points.size(), elapsed, eta);
  }
  std::fprintf(stderr, "\n");
  fs::remove_all(dir / "tmp");
  std::cout << points.size() << " points (" << todo.size() << " run now, " << points.size() - todo.size()
            << " already done) in " << jsonl.string() << " and " << csv.string() << "\n";
  return kOk;
}

}  // namespace memtwin::cli
