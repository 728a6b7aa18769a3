// memtwin plan: the best feasible configuration in a search space. Candidates the analytic memory
// model rejects are pruned in-process; the rest run on the chosen backend as their own processes;
// requirements filter them and the objective ranks them.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/memtwin/commands.h"
#include "apps/memtwin/json_path.h"
#include "apps/memtwin/options.h"
#include "apps/memtwin/point_runner.h"
#include "models/memory/serving_memory.h"
#include "models/memory/training_memory.h"
#include "models/scenario_loader.h"
#include "models/unit_parse.h"

namespace po = boost::program_options;

namespace memtwin::cli {
namespace {

struct Requirement {
  std::string text, path, op;
  double value = 0;
};

Requirement parse_requirement(const std::string& text) {
  Requirement r{text, "", "", 0};
  for (const char* op : {"<=", ">=", "==", "!=", "<", ">"}) {
    const auto at = text.find(op);
    if (at == std::string::npos) continue;
    auto trim = [](std::string s) {
      s.erase(0, s.find_first_not_of(' '));
      s.erase(s.find_last_not_of(' ') + 1);
      return s;
    };
    r.path = trim(text.substr(0, at));
    r.op = op;
    try {
      r.value = std::stod(trim(text.substr(at + std::string(op).size())));
    } catch (const std::exception&) {
      throw UsageError("--require '" + text + "': the right side must be a number");
    }
    return r;
  }
  r.path = text;  // a boolean result field, e.g. memory.gpu.fits
  return r;
}

// Why a result fails a requirement, or "" when it meets it.
std::string check(const Requirement& r, const nlohmann::json& doc) {
  const auto v = number_at(doc, r.path);
  if (!v) return r.path + " is not in the result";
  bool ok = true;
  if (r.op.empty()) ok = *v != 0;
  else if (r.op == "<=") ok = *v <= r.value;
  else if (r.op == ">=") ok = *v >= r.value;
  else if (r.op == "<") ok = *v < r.value;
  else if (r.op == ">") ok = *v > r.value;
  else if (r.op == "==") ok = *v == r.value;
  else ok = *v != r.value;
  if (ok) return "";
  std::ostringstream why;
  why << r.text << " fails (" << r.path << " = " << *v << ")";
  return why.str();
}

struct Candidate {
  std::size_t index = 0;
  std::vector<std::string> overrides;
  std::optional<double> objective;  // known before running for gpus/cost
  int gpus = 0;
  double price = 0;
  std::string failure;              // empty: feasible
  nlohmann::json result;
};

}  // namespace

int cmd_plan(const Args& args) {
  po::options_description options("options");
  po::positional_options_description positional;
  options.add_options()
      ("scenario", po::value<std::string>(), "scenario YAML file")
      ("minimize", po::value<std::string>()->default_value("cost"),
       "gpus | cost (USD per hour) | cost_to_target (USD to train training.target_tokens) | a numeric result path")
      ("require", po::value<std::vector<std::string>>()->composing(), "PATH [<=|>=|<|>|==|!=] NUMBER, or a boolean PATH (repeatable)")
      ("search", po::value<std::vector<std::string>>()->composing(), "KEY=V1,V2,... (repeatable; every combination is a candidate)")
      ("set", po::value<std::vector<std::string>>()->composing(), "override applied to every candidate")
      ("backend", po::value<std::string>()->default_value("auto"), "backend for the candidates that fit")
      ("jobs,j", po::value<int>()->default_value(1), "candidates run at once")
      ("top", po::value<int>()->default_value(3), "runners-up to show")
      ("json", po::bool_switch(), "print JSON");
  positional.add("scenario", 1);
  auto vm = parse_args(args, options, positional,
                       "usage: memtwin plan SCENARIO --minimize gpus|cost|cost_to_target|PATH --require EXPR ... --search KEY=V1,V2 ...\n\n"
                       "Searches the combinations of the --search values for the best feasible configuration:\n"
                       "the analytic memory model prunes what cannot fit, the backend runs the rest, the\n"
                       "requirements filter and the objective ranks. Exit code 3 when nothing is feasible.");
  if (!vm) return kOk;
  if (!vm->count("scenario")) throw UsageError("a scenario file is required");
  if (!vm->count("search")) throw UsageError("give at least one --search KEY=V1,V2,...");
  const std::string scenario = (*vm)["scenario"].as<std::string>();
  std::vector<std::string> common;
  if (vm->count("set")) common = (*vm)["set"].as<std::vector<std::string>>();
  load_scenario_file(scenario, common);
  std::vector<Requirement> requirements;
  if (vm->count("require")) {
    for (const auto& r : (*vm)["require"].as<std::vector<std::string>>()) requirements.push_back(parse_requirement(r));
  }
  const std::string minimize = (*vm)["minimize"].as<std::string>();
  const Grid grid = expand_grid((*vm)["search"].as<std::vector<std::string>>(), {});

  std::vector<Candidate> candidates(grid.points.size());
  std::vector<std::size_t> to_run;
  for (std::size_t i = 0; i < grid.points.size(); ++i) {
    Candidate& c = candidates[i];
    c.index = i;
    c.overrides = grid.points[i];
    auto overrides = common;
    overrides.insert(overrides.end(), c.overrides.begin(), c.overrides.end());
    try {
      const Scenario s = load_scenario_file(scenario, overrides).scenario;
      // GPUs paid for: the whole cluster for training; the replicas' GPUs for serving.
      c.gpus = s.training ? s.cluster.total_gpus()
                          : s.inference->serving.replicas * s.inference->serving.tensor_parallel *
                                s.inference->serving.pipeline_parallel;
      c.price = s.cluster.price_per_gpu_hour.value_or(0);
      if (minimize == "gpus") c.objective = c.gpus;
      if (minimize == "cost") c.objective = c.gpus * c.price;
      // Prune with the closed-form memory model before paying for a simulation.
      if (s.training) {
        const TrainingMemory m = training_memory(s);
        if (!m.fits()) c.failure = "does not fit in memory (peak " + human_bytes(m.peak) + " of " + human_bytes(m.capacity) + ")";
      } else {
        const ServingMemory m = serving_memory(s);
        if (!m.fits) c.failure = "does not fit in memory: " + m.why_not;
      }
    } catch (const ScenarioError& e) {
      c.failure = "invalid: " + e.message();
    }
    if (c.failure.empty()) to_run.push_back(i);
  }
  run_points(scenario, (*vm)["backend"].as<std::string>(), common, grid.points, to_run, (*vm)["jobs"].as<int>(),
             std::filesystem::temp_directory_path() / ("memtwin-plan-" + std::to_string(::getpid())),
             [&](const PointOutcome& o) {
               Candidate& c = candidates[o.index];
               if (o.exit_code != 0 && o.exit_code != 3) {
                 c.failure = "the run failed: " + o.err.substr(0, o.err.find('\n'));
                 return;
               }
               c.result = nlohmann::json::parse(o.out);
               for (const auto& r : requirements) {
                 const std::string why = check(r, c.result);
                 if (!why.empty()) {
                   c.failure = why;
                   break;
                 }
               }
               if (minimize == "cost_to_target") {
                 const auto days = number_at(c.result, "time.days_to_target");
                 if (days) c.objective = c.gpus * c.price * *days * 24;
               } else if (minimize != "gpus" && minimize != "cost") {
                 c.objective = number_at(c.result, minimize);
               }
               if (c.failure.empty() && !c.objective) c.failure = "the objective " + minimize + " is not in the result";
             });

  std::vector<const Candidate*> feasible;
  for (const auto& c : candidates)
    if (c.failure.empty()) feasible.push_back(&c);
  std::stable_sort(feasible.begin(), feasible.end(), [](const Candidate* a, const Candidate* b) { return *a->objective < *b->objective; });
  // The options that would have been cheaper than the winner, and why they were not taken.
  std::vector<const Candidate*> cheaper;
  for (const auto& c : candidates) {
    if (!c.failure.empty() && c.objective && (feasible.empty() || *c.objective < *feasible.front()->objective)) cheaper.push_back(&c);
  }
  std::stable_sort(cheaper.begin(), cheaper.end(), [](const Candidate* a, const Candidate* b) { return *a->objective > *b->objective; });

  auto describe = [](const Candidate& c) {
    std::string s;
    for (const auto& o : c.overrides) s += (s.empty() ? "" : ", ") + o;
    return s;
  };
  const int top = (*vm)["top"].as<int>();
  if ((*vm)["json"].as<bool>()) {
    nlohmann::ordered_json doc;
    doc["schema"] = "memtwin.plan/1";
    doc["minimize"] = minimize;
    doc["candidates"] = candidates.size();
    doc["simulated"] = to_run.size();
    auto entry = [&](const Candidate& c) {
      nlohmann::ordered_json e;
      e["overrides"] = c.overrides;
      if (c.objective) e["objective"] = *c.objective;
      e["gpus"] = c.gpus;
      if (!c.failure.empty()) e["failure"] = c.failure;
      return e;
    };
    doc["winner"] = feasible.empty() ? nlohmann::ordered_json() : entry(*feasible.front());
    doc["runners_up"] = nlohmann::ordered_json::array();
    for (std::size_t i = 1; i < feasible.size() && static_cast<int>(i) <= top; ++i) doc["runners_up"].push_back(entry(*feasible[i]));
    doc["cheaper_but_infeasible"] = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < cheaper.size() && static_cast<int>(i) < top; ++i) doc["cheaper_but_infeasible"].push_back(entry(*cheaper[i]));
    std::cout << doc.dump(2) << "\n";
  } else {
    std::cout << candidates.size() << " candidates, " << to_run.size() << " run on the backend after the memory model pruned "
              << candidates.size() - to_run.size() << "; minimizing " << minimize << "\n";
    if (feasible.empty()) {
      std::cout << "no candidate meets the requirements\n";
    } else {
      std::cout << "best: " << describe(*feasible.front()) << "  (" << minimize << " = " << *feasible.front()->objective << ", "
                << feasible.front()->gpus << " GPUs)\n";
      for (std::size_t i = 1; i < feasible.size() && static_cast<int>(i) <= top; ++i) {
        std::cout << "  runner-up: " << describe(*feasible[i]) << "  (" << *feasible[i]->objective << ")\n";
      }
    }
    for (std::size_t i = 0; i < cheaper.size() && static_cast<int>(i) < top; ++i) {
      std::cout << "  cheaper but not taken: " << describe(*cheaper[i]) << "  (" << *cheaper[i]->objective << "): "
                << cheaper[i]->failure << "\n";
    }
  }
  return feasible.empty() ? kDoesNotFit : kOk;
}

}  // namespace memtwin::cli
