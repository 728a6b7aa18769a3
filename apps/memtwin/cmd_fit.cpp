// memtwin fit: the largest (or smallest) value of a key that still fits in memory.
#include <iostream>

#include "apps/memtwin/commands.h"
#include "apps/memtwin/options.h"
#include "models/analytic/fit_search.h"
#include "models/memory/serving_memory.h"
#include "models/memory/training_memory.h"
#include "models/scenario_loader.h"
#include "models/schema.h"
#include "models/unit_parse.h"

namespace po = boost::program_options;

namespace memtwin::cli {
namespace {

struct Evaluation {
  bool fits = false;
  Bytes peak, capacity;
};

Evaluation evaluate(const Scenario& s) {
  if (s.training) {
    TrainingMemory m = training_memory(s);
    return {m.fits(), m.peak, m.capacity};
  }
  ServingMemory m = serving_memory(s);
  return {m.fits, m.peak, m.capacity};
}

}  // namespace

int cmd_fit(const Args& args) {
  po::options_description options("options");
  po::positional_options_description positional;
  options.add_options()
      ("scenario", po::value<std::string>(), "scenario YAML file")
      ("vary", po::value<std::string>(), "the integer key to search, e.g. training.micro_batch or cluster.nodes")
      ("direction", po::value<std::string>(), "largest | smallest (default: known for common keys)")
      ("min", po::value<long long>()->default_value(1), "lower end of the search")
      ("max", po::value<long long>(), "upper end of the search (default: 1048576, or 65536 nodes)")
      ("set", po::value<std::vector<std::string>>()->composing(), "override a key (repeatable)")
      ("json", po::bool_switch(), "print the answer as JSON");
  positional.add("scenario", 1);
  auto vm = parse_args(args, options, positional,
                       "usage: memtwin fit SCENARIO --vary KEY [--direction largest|smallest] [--min N] [--max N]\n\n"
                       "The inverse question: the largest micro-batch, sequence length, context or batch of\n"
                       "sequences that fits, or the smallest number of nodes or GPUs for the job. Uses the\n"
                       "analytic memory model; exit code 3 when no value in range fits.");
  if (!vm) return kOk;
  if (!vm->count("scenario")) throw UsageError("a scenario file is required");
  if (!vm->count("vary")) throw UsageError("--vary KEY is required");
  const std::string key = (*vm)["vary"].as<std::string>();
  const ParamSpec* spec = find_param(key);
  if (!spec || spec->kind != ValueKind::integer) throw UsageError("--vary needs an integer scenario key; '" + key + "' is not one");
  FitDirection direction;
  if (vm->count("direction")) {
    const std::string d = (*vm)["direction"].as<std::string>();
    if (d != "largest" && d != "smallest") throw UsageError("--direction is largest or smallest");
    direction = d == "largest" ? FitDirection::largest : FitDirection::smallest;
  } else if (auto known = default_fit_direction(key)) {
    direction = *known;
  } else {
    throw UsageError("say --direction largest or smallest for " + key);
  }
  const long long lo = (*vm)["min"].as<long long>();
  const long long hi = vm->count("max") ? (*vm)["max"].as<long long>() : (key == "cluster.nodes" ? 65536 : 1 << 20);
  if (lo < 1 || hi < lo) throw UsageError("the range --min..--max is empty");

  std::vector<std::string> base_overrides;
  if (vm->count("set")) base_overrides = (*vm)["set"].as<std::vector<std::string>>();
  const std::string file = (*vm)["scenario"].as<std::string>();
  refuse_jobs(load_scenario_file(file, base_overrides).scenario, "fit");  // it must be valid (errors exit 2)

  std::map<std::int64_t, Evaluation> seen;
  auto probe = [&](std::int64_t v) {
    auto overrides = base_overrides;
    overrides.push_back(key + "=" + std::to_string(v));
    try {
      Evaluation e = evaluate(load_scenario_file(file, overrides).scenario);
      seen[v] = e;
      return e.fits ? Probe::fits : Probe::does_not_fit;
    } catch (const ScenarioError&) {
      return Probe::invalid;
    }
  };
  FitAnswer answer = fit_search(probe, lo, hi, direction);
  const char* word = direction == FitDirection::largest ? "largest" : "smallest";

  if ((*vm)["json"].as<bool>()) {
    nlohmann::ordered_json doc;
    doc["schema"] = "memtwin.fit/1";
    doc["key"] = key;
    doc["direction"] = word;
    doc["value"] = answer.value ? nlohmann::ordered_json(*answer.value) : nlohmann::ordered_json();
    if (answer.value) doc["peak_bytes"] = seen[*answer.value].peak.count();
    if (answer.first_failing) {
      doc["first_failing"] = *answer.first_failing;
      doc["first_failing_peak_bytes"] = seen[*answer.first_failing].peak.count();
    }
    doc["evaluations"] = answer.evaluations;
    std::cout << doc.dump(2) << "\n";
  } else if (answer.value) {
    const Evaluation& e = seen[*answer.value];
    std::cout << word << " " << key << " that fits: " << *answer.value << " (peak " << human_bytes(e.peak) << " of "
              << human_bytes(e.capacity) << ")\n";
    if (answer.first_failing) {
      std::cout << "  " << *answer.first_failing << " needs " << human_bytes(seen[*answer.first_failing].peak) << "\n";
    }
  } else {
    std::cout << "no value of " << key << " in " << lo << ".." << hi << " fits\n";
  }
  return answer.value ? kOk : kDoesNotFit;
}

}  // namespace memtwin::cli
