// memtwin run / memtwin check
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "apps/memtwin/backends.h"
#include "apps/memtwin/commands.h"
#include "apps/memtwin/layer_truncation.h"
#include "apps/memtwin/options.h"
#include "apps/memtwin/point_runner.h"
#include "apps/memtwin/run_directory.h"
#include "apps/memtwin/seed_spread.h"
#include "apps/memtwin/terminal_progress.h"
#include "apps/memtwin/text_report.h"
#include "hw/host/mpi_collectives.h"
#include "models/plan/plan_json.h"
#include "models/plan/training_plan.h"
#include "models/serving/iteration_plan.h"
#include "models/serving/request_stream.h"
#include "models/result.h"
#include "models/scenario_loader.h"

namespace po = boost::program_options;

namespace memtwin::cli {
namespace {

LoadedScenario load(const po::variables_map& vm, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> overrides;
  if (vm.count("set")) overrides = vm["set"].as<std::vector<std::string>>();
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  if (!vm.count("scenario")) return load_quickstart_scenario(overrides);
  return load_scenario_file(vm["scenario"].as<std::string>(), overrides);
}

void add_scenario_options(po::options_description& options, po::positional_options_description& positional) {
  options.add_options()
      ("scenario", po::value<std::string>(), "scenario YAML file (default: the built-in quick-start scenario)")
      ("set", po::value<std::vector<std::string>>()->composing(), "override a key: --set training.micro_batch=4 (repeatable)");
  positional.add("scenario", 1);
}

// The plan the backends execute, as JSON: the training Plan (streamed: it can hold millions of
// ops) or the serving iteration plan.
void emit_plan(const std::string& path, const Scenario& s) {
  std::ofstream out(path);
  if (!out) throw UsageError("--emit-plan: cannot write " + path);
  if (s.training) write_training_plan_json(out, build_training_plan(s));
  else out << IterationPlan(s).to_json().dump(2) << "\n";
  if (!out) throw UsageError("--emit-plan: writing " + path + " failed");
}

// The result at each of `seeds` after the first (whose result is `first`): each its own `memtwin
// run` process, since SimGrid runs one simulation per process; a few at a time.
std::vector<nlohmann::ordered_json> with_other_seeds(const po::variables_map& vm, const std::string& backend,
                                                     const std::vector<std::uint64_t>& seeds, const nlohmann::ordered_json& first) {
  std::vector<std::string> overrides;
  if (vm.count("set")) overrides = vm["set"].as<std::vector<std::string>>();
  std::vector<std::vector<std::string>> points;
  std::vector<std::size_t> todo;
  for (std::size_t i = 1; i < seeds.size(); ++i) {
    points.push_back({"seed=" + std::to_string(seeds[i])});
    todo.push_back(todo.size());
  }
  const ScratchDirectory scratch("memtwin-seeds");
  std::vector<nlohmann::ordered_json> results(seeds.size());
  results[0] = first;
  const int jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  run_points(vm["scenario"].as<std::string>(), backend, overrides, points, todo, jobs, scratch.path, [&](const PointOutcome& o) {
    if (o.exit_code != kOk && o.exit_code != kDoesNotFit)
      throw std::runtime_error("--seeds: the run at seed " + std::to_string(seeds[o.index + 1]) + " failed (exit " +
                               std::to_string(o.exit_code) + "): " + o.err.substr(0, 2000));
    results[o.index + 1] = nlohmann::ordered_json::parse(o.out);
  });
  return results;
}

}  // namespace

int cmd_run(const Args& args) {
  po::options_description options("options");
  po::positional_options_description positional;
  add_scenario_options(options, positional);
  std::string backends;
  for (const auto& n : backend_names()) backends += (backends.empty() ? "" : ", ") + n;
  options.add_options()
      ("backend", po::value<std::string>()->default_value(default_backend()), ("backend to run: " + backends + " (auto: sim)").c_str())
      ("device", po::value<std::string>()->default_value("host"), (std::string("hw backend: the device to run on (") + kHwDevices + ")").c_str())
      ("steps", po::value<int>()->default_value(3), "hw backend: timed steps after one warm-up step (the median is reported)")
      ("layers", po::value<int>(), "hw backend, training: run N of the model's layers (and max(2 x pipeline stages, N/2) too) and extrapolate "
                                   "step time and peak memory to all of them (depth_scaling)")
      ("json", po::bool_switch(), "print exactly one JSON document (memtwin.result/1) on stdout")
      ("every-flow", po::bool_switch(), "sim backend, training: run every flow of every collective (by default a collective "
                                        "alone on its links runs as the few flows that stand for the rest: the same times)")
      ("out", po::value<std::string>(), "directory for output files (result.json, ...)")
      ("emit-plan", po::value<std::string>(), "write what runs as JSON to FILE: the training Plan (memtwin.training_plan/1) "
                                             "or the serving iteration plan (memtwin.iteration_plan/1)")
      ("seeds", po::value<int>()->default_value(1), "serving: run the scenario at N consecutive seeds (its own first) and add "
                                                    "each metric's mean and 95% interval over them (section seeds); the result "
                                                    "itself stays the scenario seed's");
  auto vm = parse_args(args, options, positional,
                       "usage: memtwin run [SCENARIO] [--set KEY=VALUE]... [--backend NAME] [--device D] [--steps N] [--layers N] [--json] [--every-flow] [--out DIR] [--emit-plan FILE] [--seeds N]\n\n"
                       "Predicts memory (and, with the sim backend, time) for the scenario. Exit code 3 when\n"
                       "it does not fit in memory; the result is printed all the same.");
  if (!vm) return kOk;

  LoadedScenario loaded = load(*vm);
  if ((*vm)["every-flow"].as<bool>()) loaded.scenario.simulation.merge_lone_collectives = false;
  HwOptions hw{(*vm)["device"].as<std::string>(), (*vm)["steps"].as<int>()};
  if (hw.steps < 1) throw UsageError("--steps must be at least 1");
  const std::string backend_name = resolve_backend((*vm)["backend"].as<std::string>(), loaded.scenario);
  if (backend_name != "sim") refuse_jobs(loaded.scenario, "--backend " + backend_name);
  if (vm->count("emit-plan")) refuse_jobs(loaded.scenario, "--emit-plan");
  if (vm->count("layers")) {
    if (backend_name != "hw") throw UsageError("--layers measures on the hardware backend: add --backend hw");
    LayerTruncation t = truncate_layers([&](const std::vector<std::string>& extra) { return load(*vm, extra); }, loaded.scenario,
                                        (*vm)["layers"].as<int>());
    loaded = std::move(t.measured);
    hw.shallower = std::move(t.shallower);
    hw.full_layers = t.full_layers;
  }
  const int seed_count = (*vm)["seeds"].as<int>();
  const std::vector<std::uint64_t> seeds = seeds_to_run(loaded.scenario.seed, seed_count);
  if (seed_count > 1) {
    if (!vm->count("scenario")) throw UsageError("--seeds: give a serving scenario file (the built-in scenario is a training step)");
    if (!loaded.scenario.jobs.empty()) {
      throw UsageError("--seeds: a scenario of jobs runs each job once, at its own file's seed; run a serving job's file with "
                       "--seeds for its spread");
    }
    if (!loaded.scenario.inference) throw UsageError("--seeds: a training step does not depend on the seed; it is for serving scenarios");
    if (backend_name == "hw") throw UsageError("--seeds runs the scenario once per seed on the simulator (or analytic backend); "
                                               "on the hardware backend run it once per seed with --set seed=N");
  }
  auto backend = make_backend(backend_name, hw);
  RunResult result;
  {
    TerminalProgress progress = TerminalProgress::for_stderr();
    backend->report_progress_to(&progress);
    result = backend->run(loaded.scenario);
    backend->report_progress_to(nullptr);
  }
  if (!result.primary) return result.fits ? kOk : kDoesNotFit;  // another process reports
  nlohmann::ordered_json doc = result_document(loaded, result);
  if (seed_count > 1) doc["seeds"] = seed_spread(seeds, with_other_seeds(*vm, backend_name, seeds, doc));

  if (vm->count("out")) write_run_directory((*vm)["out"].as<std::string>(), doc, result);
  if (vm->count("emit-plan")) emit_plan((*vm)["emit-plan"].as<std::string>(), loaded.scenario);
  if ((*vm)["json"].as<bool>()) {
    std::cout << doc.dump(2) << "\n";
  } else {
    print_text_report(std::cout, doc);
  }
  if (result.abort_others) {
    std::cout.flush();
    hw::MpiSession::get().abort(kDoesNotFit);
  }
  return result.fits ? kOk : kDoesNotFit;
}

int cmd_check(const Args& args) {
  po::options_description options("options");
  po::positional_options_description positional;
  add_scenario_options(options, positional);
  options.add_options()("print", po::bool_switch(), "print the resolved scenario (presets and defaults filled) as JSON");
  auto vm = parse_args(args, options, positional,
                       "usage: memtwin check SCENARIO [--set KEY=VALUE]... [--print]\n\n"
                       "Validates a scenario: exit code 0 when it is valid, 2 with a message naming the file,\n"
                       "line, column and key when it is not.");
  if (!vm) return kOk;
  if (!vm->count("scenario")) throw UsageError("a scenario file is required");
  LoadedScenario loaded = load(*vm);
  // The files the scenario refers to are read as a run would read them.
  if (loaded.scenario.inference) check_workload_files(*loaded.scenario.inference);
  if ((*vm)["print"].as<bool>()) {
    std::cout << loaded.resolved.dump(2) << "\n";
  } else {
    std::cout << (*vm)["scenario"].as<std::string>() << ": ok ('" << loaded.scenario.name << "', "
              << workload_name(loaded.scenario) << ")\n";
  }
  return kOk;
}

}  // namespace memtwin::cli
