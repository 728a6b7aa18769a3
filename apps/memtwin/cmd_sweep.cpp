// memtwin sweep: run a scenario over a grid of overrides, in parallel processes (SimGrid runs one
// simulation per process anyway), appending one line per finished point so that a killed sweep
// loses nothing and `--resume` repeats nothing.

#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/memtwin/commands.h"
#include "apps/memtwin/json_path.h"
#include "apps/memtwin/options.h"
#include "apps/memtwin/point_runner.h"
#include "models/scenario_loader.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace memtwin::cli {
namespace {


// The metrics worth a column in points.csv, when the result has them.
const std::vector<std::string> kColumns = {"memory.gpu.fits", "memory.gpu.peak_bytes", "time.step_s", "time.mfu",
                                           "time.tokens_per_s", "latency_s.ttft.p99", "latency_s.tpot.p99",
                                           "throughput.requests_per_s", "kv_cache.capacity_tokens"};

std::string lookup(const nlohmann::json& doc, const std::string& path) {
  const nlohmann::json* node = find_path(doc, path);
  if (!node) return "";
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

  std::vector<std::string> grid_specs, zip_specs;
  if (vm->count("grid")) grid_specs = (*vm)["grid"].as<std::vector<std::string>>();
  if (vm->count("zip")) zip_specs = (*vm)["zip"].as<std::vector<std::string>>();
  if (grid_specs.empty() && zip_specs.empty()) throw UsageError("give at least one --grid or --zip");
  const Grid grid = expand_grid(grid_specs, zip_specs);
  const auto& keys = grid.keys;
  const auto& points = grid.points;

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
  run_points(scenario, (*vm)["backend"].as<std::string>(), common, points, todo, (*vm)["jobs"].as<int>(), dir / "tmp",
             [&](const PointOutcome& o) {
               nlohmann::json line;
               line["point"] = o.index;
               line["overrides"] = points[o.index];
               line["exit_code"] = o.exit_code;
               line["status"] = o.exit_code == 0 ? "ok" : o.exit_code == 3 ? "does_not_fit" : o.exit_code == 2 ? "invalid" : "error";
               try {
                 if (o.exit_code == 0 || o.exit_code == 3) line["result"] = nlohmann::json::parse(o.out);
               } catch (const std::exception&) {
                 line["status"] = "error";
               }
               std::string message = o.err;
               while (!message.empty() && message.back() == '\n') message.pop_back();
               if (!message.empty() && o.exit_code != 0 && o.exit_code != 3) line["error"] = message;
               std::ofstream(jsonl, std::ios::app) << line.dump() << "\n";
               std::ofstream(csv, std::ios::app) << csv_row(line);
             });
  fs::remove_all(dir / "tmp");
  std::cout << points.size() << " points (" << todo.size() << " run now, " << points.size() - todo.size()
            << " already done) in " << jsonl.string() << " and " << csv.string() << "\n";
  return kOk;
}

}  // namespace memtwin::cli
