#pragma once
// RunResult: what every backend (analytic, sim, hw) returns, and the one JSON document
// (`"schema": "memtwin.result/1"`) that `memtwin run --json` prints and analysis/ reads.
// Field names follow the output contracts in the issues ("memory.gpu.peak_bytes", ...): values in
// base units, the unit in the key's suffix (_bytes, _s, _per_s, _flops).
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/scenario_loader.h"

namespace memtwin {

inline constexpr const char* kResultSchema = "memtwin.result/1";

struct RunResult {
  std::string backend;
  nlohmann::ordered_json metrics = nlohmann::ordered_json::object();  ///< "model", "memory", ...
  bool fits = true;                 ///< false: the scenario runs out of memory (exit code 3)
  std::vector<std::string> notes;   ///< remarks for people: what was not modelled, hints to fit
  /// Extra outputs for `--out DIR`: name -> what writes its content, called only when the run
  /// directory is written (a million-request trace is not built for a run that prints a summary).
  std::map<std::string, std::function<std::string()>> files;
  /// False on the helper processes of a multi-process backend (MPI ranks other than the one that
  /// reports): they print and write nothing.
  bool primary = true;
  /// The reporting process must stop the others after reporting (they wait for it forever).
  bool abort_others = false;
};

/// The full result document: schema, scenario, backend, workload, input (the resolved scenario),
/// then the metrics and notes. Every number in it is finite: a NaN or infinite metric throws
/// std::logic_error naming it (a bug, reported as an internal error, never printed as null).
nlohmann::ordered_json result_document(const LoadedScenario& loaded, const RunResult& result);

}  // namespace memtwin
