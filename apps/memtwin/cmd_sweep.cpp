// memtwin sweep: run a scenario over a grid of overrides, in parallel processes (SimGrid runs one
// simulation per process anyway), appending one line per finished point so that a killed sweep
// loses nothing and `--resume` repeats nothing; a finished sweep's files are in point order.

#include <filesystem>
#include <fstream>
#include <algorithm>
#include <cmath>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/memtwin/commands.h"
#include "apps/memtwin/json_path.h"
#include "apps/memtwin/options.h"
#include "apps/memtwin/mpi_split.h"
#include "apps/memtwin/point_runner.h"
#include "models/scenario_loader.h"
#include "models/schema.h"
#include "models/unit_parse.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace memtwin::cli {
namespace {


// The metrics worth a column in points.csv, by the scenario's workload.
const std::vector<std::string> kTrainingColumns = {"memory.gpu.fits", "memory.gpu.peak_bytes", "time.step_s", "time.mfu",
                                                   "time.tokens_per_s"};
const std::vector<std::string> kServingColumns = {"memory.gpu.fits", "memory.gpu.peak_bytes", "latency_s.ttft.p99",
                                                  "latency_s.tpot.p99", "throughput.requests_per_s", "kv_cache.capacity_tokens"};

// A swept value in base units, and the suffix its column carries ("5/s" -> 5, "_per_s"); none
// where the key is not numeric or the text does not parse (an invalid point keeps its text).
struct BaseUnitValue {
  double value = 0;
  std::string suffix;
};
std::optional<BaseUnitValue> base_unit_value(const std::string& key, const std::string& text) {
  const ParamSpec* p = find_param(key);
  if (!p) return std::nullopt;
  try {
    switch (p->kind) {
      case ValueKind::integer:
      case ValueKind::number:
        if (auto v = parse_plain_number(text)) return BaseUnitValue{*v, ""};
        return std::nullopt;
      case ValueKind::rate: return BaseUnitValue{parse_rate_per_second(text), "_per_s"};
      case ValueKind::bytes: return BaseUnitValue{parse_bytes(text).as_double(), "_bytes"};
      case ValueKind::duration: return BaseUnitValue{parse_duration(text).value(), "_s"};
      case ValueKind::bandwidth: return BaseUnitValue{parse_bandwidth(text).value(), "_bytes_per_s"};
      case ValueKind::flops_rate: return BaseUnitValue{parse_flops_rate(text).value(), "_flops_per_s"};
      default: return std::nullopt;
    }
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Each swept key's column name: the key, with its unit where its values carry one.
std::string swept_column(const std::string& key) {
  const ParamSpec* p = find_param(key);
  if (!p) return key;
  switch (p->kind) {
    case ValueKind::rate: return key + "_per_s";
    case ValueKind::bytes: return key + "_bytes";
    case ValueKind::duration: return key + "_s";
    case ValueKind::bandwidth: return key + "_bytes_per_s";
    case ValueKind::flops_rate: return key + "_flops_per_s";
    default: return key;
  }
}

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
      ("grid", po::value<std::vector<std::string>>()->composing(), "KEY=V1,V2,... (repeatable; cartesian product); a value LO..HI doubles from LO to HI, LO..HI:STEP counts by STEP")
      ("zip", po::value<std::vector<std::string>>()->composing(), "KEY=V1,V2,... varied together with the other --zip keys")
      ("set", po::value<std::vector<std::string>>()->composing(), "override applied to every point")
      ("jobs,j", po::value<int>()->default_value(1), "points run at once")
      ("backend", po::value<std::string>()->default_value("auto"), "backend for every point")
      ("out", po::value<std::string>(), "directory for points.jsonl and points.csv (required)")
      ("resume", po::bool_switch(), "skip the points already in DIR/points.jsonl")
      ("force", po::bool_switch(), "replace the points already in DIR (without it, a DIR with files in it is refused)");
  positional.add("scenario", 1);
  auto vm = parse_args(args, options, positional,
                       "usage: memtwin sweep SCENARIO --grid KEY=V1,V2 [--grid ...] [--zip ...] [-j N] --out DIR [--resume | --force]\n\n"
                       "Runs every combination of the overrides, N at a time, appending each finished point to\n"
                       "DIR/points.jsonl and DIR/points.csv. Invalid combinations are recorded with their error.");
  if (!vm) return kOk;
  if (!vm->count("scenario")) throw UsageError("a scenario file is required");
  if (!vm->count("out")) throw UsageError("--out DIR is required");
  const std::string scenario = (*vm)["scenario"].as<std::string>();
  std::vector<std::string> common;
  if (vm->count("set")) common = (*vm)["set"].as<std::vector<std::string>>();
  const Scenario base = load_scenario_file(scenario, common).scenario;  // the base must be valid
  refuse_jobs(base, "sweep");
  const bool training = base.training.has_value();
  const std::vector<std::string>& columns = training ? kTrainingColumns : kServingColumns;

  std::vector<std::string> grid_specs, zip_specs;
  if (vm->count("grid")) grid_specs = (*vm)["grid"].as<std::vector<std::string>>();
  if (vm->count("zip")) zip_specs = (*vm)["zip"].as<std::vector<std::string>>();
  if (grid_specs.empty() && zip_specs.empty()) throw UsageError("give at least one --grid or --zip");
  const Grid grid = expand_grid(grid_specs, zip_specs);
  const auto& keys = grid.keys;
  const auto& points = grid.points;

  const fs::path dir = (*vm)["out"].as<std::string>();
  const bool resume = (*vm)["resume"].as<bool>(), force = (*vm)["force"].as<bool>();
  if (resume && force) throw UsageError("--resume continues the sweep in --out, --force replaces it: give one");
  // Under mpirun each rank runs its share of the points (index mod size) into a file of its own;
  // rank 0 gathers them into the one result file, in point order, after a barrier.
  const MpiSplit mpi = MpiSplit::from_launcher();
  // A directory with files in it holds another sweep's points (or anything else): continuing or
  // replacing it is the user's call. Every rank looks before any writes, so all decide alike.
  const bool occupied = fs::is_directory(dir) && !fs::is_empty(dir);
  mpi.barrier();
  if (!resume && !force && occupied) {
    throw UsageError("--out " + dir.string() + " already has files in it: add --resume to continue its sweep, --force " +
                     "to replace its points, or name an empty or new directory");
  }
  fs::create_directories(dir);
  const fs::path jsonl = dir / "points.jsonl", csv = dir / "points.csv";
  // One CSV row per JSONL line, so both files can be rebuilt from the JSONL alone.
  auto csv_row = [&](const nlohmann::json& line) {
    std::ostringstream c;
    c << line["point"].get<std::size_t>() << "," << line["status"].get<std::string>();
    const nlohmann::json values = line.value("values", nlohmann::json::object());
    for (const auto& assignment : line["overrides"]) {
      const std::string a = assignment.get<std::string>();
      const std::string key = a.substr(0, a.find('='));
      c << "," << csv_cell(values.contains(key) ? values[key].dump() : a.substr(a.find('=') + 1));
    }
    const nlohmann::json result = line.value("result", nlohmann::json());
    for (const auto& col : columns) c << "," << csv_cell(result.is_null() ? "" : lookup(result, col));
    c << "," << csv_cell(line.value("error", "")) << "\n";
    return c.str();
  };
  std::vector<nlohmann::json> kept;
  if (resume && fs::exists(jsonl)) {
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
  for (const auto& line : kept) done.insert(line["overrides"].dump());
  auto write_files = [&](std::vector<nlohmann::json> lines, bool sort) {
    if (sort) {
      std::stable_sort(lines.begin(), lines.end(),
                       [](const auto& a, const auto& b) { return a["point"].template get<std::size_t>() < b["point"].template get<std::size_t>(); });
    }
    std::ofstream j(jsonl, std::ios::trunc);
    std::ofstream c(csv, std::ios::trunc);
    c << "point,status";
    for (const auto& k : keys) c << "," << csv_cell(swept_column(k));
    for (const auto& col : columns) c << "," << col;
    c << ",error\n";
    for (const auto& line : lines) {
      j << line.dump() << "\n";
      c << csv_row(line);
    }
  };
  if (!mpi.active) write_files(kept, false);

  std::vector<std::size_t> todo;
  for (std::size_t i = 0; i < points.size(); ++i) {
    nlohmann::json overrides = points[i];
    if (!done.count(overrides.dump()) && static_cast<int>(i % mpi.size) == mpi.rank) todo.push_back(i);
  }
  const fs::path own = mpi.active ? dir / ("points.rank" + std::to_string(mpi.rank) + ".jsonl") : jsonl;
  if (mpi.active) std::ofstream(own, std::ios::trunc);
  const fs::path scratch = dir / (mpi.active ? "tmp.rank" + std::to_string(mpi.rank) : std::string("tmp"));
  std::vector<nlohmann::json> finished = kept;
  run_points(scenario, (*vm)["backend"].as<std::string>(), common, points, todo, (*vm)["jobs"].as<int>(), scratch,
             [&](const PointOutcome& o) {
               nlohmann::json line;
               line["point"] = o.index;
               line["overrides"] = points[o.index];
               // The swept values as numbers in base units (a rate per second, a size in bytes).
               nlohmann::json values = nlohmann::json::object();
               for (const auto& assignment : points[o.index]) {
                 const std::string key = assignment.substr(0, assignment.find('='));
                 if (auto v = base_unit_value(key, assignment.substr(assignment.find('=') + 1))) {
                   const bool whole = std::floor(v->value) == v->value && std::fabs(v->value) < 9e15;
                   values[key] = whole ? nlohmann::json(static_cast<std::int64_t>(v->value)) : nlohmann::json(v->value);
                 }
               }
               if (!values.empty()) line["values"] = values;
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
               std::ofstream(own, std::ios::app) << line.dump() << "\n";
               if (!mpi.active) std::ofstream(csv, std::ios::app) << csv_row(line);
               finished.push_back(std::move(line));
             });
  fs::remove_all(scratch);
  // Points were appended as they finished (a kill loses none); the files end in point order, so
  // the same sweep writes the same bytes whatever -j and the machine's timing.
  if (!mpi.active) write_files(finished, true);
  if (mpi.active) {
    mpi.barrier();
    if (mpi.rank == 0) {
      std::vector<nlohmann::json> all = kept;
      for (int r = 0; r < mpi.size; ++r) {
        const fs::path part = dir / ("points.rank" + std::to_string(r) + ".jsonl");
        std::ifstream in(part);
        for (std::string line; std::getline(in, line);) all.push_back(nlohmann::json::parse(line));
        in.close();
        fs::remove(part);
      }
      write_files(all, true);
    }
    mpi.barrier();
  }
  if (mpi.rank == 0) {
    std::cout << points.size() << " points (" << points.size() - done.size() << " run now" << (mpi.active ? " by " + std::to_string(mpi.size) + " MPI ranks" : std::string()) << ", "
              << done.size() << " already done) in " << jsonl.string() << " and " << csv.string() << "\n";
  }
  return kOk;
}

}  // namespace memtwin::cli
