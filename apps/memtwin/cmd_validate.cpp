// memtwin validate: the prediction (sim backend) and the measurement (hw backend) of one scenario,
// on the same plan, side by side with the prediction's error. memtwin compare: the same for two
// saved results.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "apps/memtwin/backends.h"
#include "apps/memtwin/commands.h"
#include "apps/memtwin/comparison.h"
#include "apps/memtwin/options.h"
#include "apps/memtwin/layer_truncation.h"
#include "apps/memtwin/rank_launcher.h"
#include "apps/memtwin/run_directory.h"
#include "models/plan/training_plan.h"
#include "models/result.h"
#include "models/scenario_loader.h"

namespace po = boost::program_options;

namespace memtwin::cli {
namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("cannot read " + path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(path + " is not a JSON document: " + e.what());
  }
}

}  // namespace

int cmd_validate(const Args& args) {
  po::options_description options("options");
  po::positional_options_description positional;
  options.add_options()
      ("scenario", po::value<std::string>(), "scenario YAML file")
      ("set", po::value<std::vector<std::string>>()->composing(), "override a key (repeatable), in both runs")
      ("device", po::value<std::string>()->default_value("host"), (std::string("device to measure on (") + kHwDevices + ")").c_str())
      ("steps", po::value<int>()->default_value(3), "timed steps after one warm-up step")
      ("layers", po::value<int>(), "training: validate with N of the model's layers, and compare the measurement extrapolated to all "
                                   "of them (memtwin run --layers) with the full model's prediction")
      ("json", po::bool_switch(), "print the validation document (memtwin.validation/1) instead of the table")
      ("out", po::value<std::string>(), "directory for validation.json and each side's run directory (predicted/, measured/)");
  positional.add("scenario", 1);
  auto vm = parse_args(args, options, positional,
                       "usage: memtwin validate SCENARIO [--set KEY=VALUE]... [--device host] [--steps N] [--layers N] [--json] [--out DIR]\n\n"
                       "Runs the scenario's plan in the simulator and on the device (as many MPI ranks as the plan\n"
                       "has, started here), and prints per metric: predicted, measured, error of the prediction.\n"
                       "Calibrate the device first (`memtwin calibrate`) and point the scenario at the file with\n"
                       "--set cluster.calibration=FILE.yaml.");
  if (!vm) return kOk;
  if (!vm->count("scenario")) throw UsageError("a scenario file is required");
  const std::string path = (*vm)["scenario"].as<std::string>();
  std::vector<std::string> overrides;
  if (vm->count("set")) overrides = (*vm)["set"].as<std::vector<std::string>>();
  const std::string device = (*vm)["device"].as<std::string>();
  const int steps = (*vm)["steps"].as<int>();
  if (steps < 1) throw UsageError("--steps must be at least 1");

  LoadedScenario loaded = load_scenario_file(path, overrides);
  refuse_jobs(loaded.scenario, "validate");
  // --layers: both sides run the shallower model (one plan); the full model is predicted too, for
  // the measurement extrapolated to its depth.
  std::optional<LoadedScenario> full;
  if (vm->count("layers")) {
    const int layers = (*vm)["layers"].as<int>();
    LayerTruncation t = truncate_layers(
        [&](const std::vector<std::string>& extra) {
          auto all = overrides;
          all.insert(all.end(), extra.begin(), extra.end());
          return load_scenario_file(path, all);
        },
        loaded.scenario, layers);
    full = std::move(loaded);
    loaded = std::move(t.measured);
  }
  // A training step runs one process per plan rank; a serving run one process per replica.
  const int ranks = loaded.scenario.training ? build_training_plan(loaded.scenario).ranks() : loaded.scenario.inference->serving.replicas;

  // Prediction here; measurement in `ranks` processes of `memtwin run --backend hw`.
  const RunResult predicted_run = make_backend("sim")->run(loaded.scenario);
  const nlohmann::ordered_json predicted = result_document(loaded, predicted_run);
  std::vector<std::string> hw_args = {"run", path, "--backend", "hw", "--device", device, "--steps", std::to_string(steps), "--json"};
  if (full) hw_args.insert(hw_args.end(), {"--layers", std::to_string((*vm)["layers"].as<int>())});
  for (const auto& o : overrides) {
    hw_args.push_back("--set");
    hw_args.push_back(o);
  }
  std::filesystem::path out_dir;
  if (vm->count("out")) {
    out_dir = (*vm)["out"].as<std::string>();
    write_run_directory(out_dir / "predicted", predicted, predicted_run);
    hw_args.push_back("--out");
    hw_args.push_back((out_dir / "measured").string());
  }
  const Launched measured_run = launch_ranks(ranks, hw_args);
  nlohmann::json measured;
  try {
    measured = nlohmann::json::parse(measured_run.out);
  } catch (const nlohmann::json::exception&) {
    std::cerr << "memtwin validate: the measured run (" << ranks << " ranks) exited with " << measured_run.exit_code
              << " and printed no result\n";
    return measured_run.exit_code == 0 ? kInternalError : measured_run.exit_code;
  }
  require_same_plan(predicted, measured);
  const auto rows = compare_results(predicted, measured);
  nlohmann::ordered_json doc = {{"schema", kValidationSchema},
                                {"scenario", loaded.scenario.name},
                                {"device", device},
                                {"ranks", ranks},
                                {"plan_hash", *plan_hash_of(predicted)},
                                {"predicted_plan_hash", *plan_hash_of(predicted)},
                                {"measured_plan_hash", *plan_hash_of(measured)},
                                {"metrics", comparison_json(rows)},
                                {"not_compared", one_sided_json(one_sided_metrics(predicted, measured))},
                                {"predicted_fits", predicted_run.fits},
                                {"measured_fits", measured_run.exit_code != kDoesNotFit}};
  std::vector<ComparedMetric> deep_rows;
  if (full && measured.contains("depth_scaling")) {
    // The full model's prediction (SimGrid runs one simulation per process: another process
    // simulates it) against the measurement extrapolated to its depth.
    std::vector<std::string> sim_args = {"run", path, "--backend", "sim", "--json"};
    for (const auto& o : overrides) sim_args.insert(sim_args.end(), {"--set", o});
    const Launched simulated = launch_ranks(1, sim_args);
    nlohmann::json predicted_full;
    try {
      predicted_full = nlohmann::json::parse(simulated.out);
    } catch (const nlohmann::json::exception&) {
      std::cerr << "memtwin validate: simulating the full model exited with " << simulated.exit_code << " and printed no result\n";
      return kInternalError;
    }
    const auto& d = measured["depth_scaling"];
    nlohmann::json extrapolated = {{"time", {{"step_s", d["step_s"]}}}, {"memory", {{"gpu", {{"peak_bytes", d["peak_bytes"]}}}}}};
    deep_rows = compare_results(predicted_full, extrapolated);
    doc["depth_scaling"] = {{"layers", d["layers"]}, {"measured_layers", d["measured_layers"]}, {"metrics", comparison_json(deep_rows)}};
  }
  if (!out_dir.empty()) write_text_file(out_dir / "validation.json", doc.dump(2) + "\n");
  if ((*vm)["json"].as<bool>()) {
    std::cout << doc.dump(2) << "\n";
  } else {
    std::cout << "memtwin validate '" << loaded.scenario.name << "': sim against " << device << " (" << ranks
              << " rank(s)), plan " << *plan_hash_of(predicted) << "\n\n";
    print_comparison(std::cout, rows, "predicted", "measured");
    print_one_sided(std::cout, one_sided_metrics(predicted, measured));
    if (!deep_rows.empty()) {
      std::cout << "\nthe full model (" << full->scenario.model.layers << " layers): predicted, and measured at "
                << loaded.scenario.model.layers << " and " << measured["depth_scaling"]["measured_layers"][0]
                << " layers extrapolated in depth\n\n";
      print_comparison(std::cout, deep_rows, "predicted", "extrapolated");
    }
    if (predicted_run.fits != (measured_run.exit_code != kDoesNotFit)) {
      std::cout << "\nthe prediction says it " << (predicted_run.fits ? "fits" : "does not fit")
                << "; the device says it " << (measured_run.exit_code != kDoesNotFit ? "fits" : "does not fit") << "\n";
    }
  }
  return measured_run.exit_code == kDoesNotFit || !predicted_run.fits ? kDoesNotFit : kOk;
}

namespace {

// compare --what-if: B against A whatever their plans.
int print_what_if(const nlohmann::json& a, const nlohmann::json& b, bool json) {
  const auto rows = what_if_rows(a, b);
  const auto changes = input_changes(a, b);
  auto one_sided = one_sided_metrics(a, b);
  for (auto& m : one_sided) m.only_in = m.only_in == "predicted" ? "A" : "B";
  if (json) {
    nlohmann::ordered_json doc;
    doc["what_if"] = true;
    doc["plan_hashes"] = {plan_hash_of(a).value_or(""), plan_hash_of(b).value_or("")};
    doc["inputs_changed"] = nlohmann::ordered_json::array();
    for (const auto& c : changes) doc["inputs_changed"].push_back({{"key", c.key}, {"a", c.a}, {"b", c.b}});
    doc["metrics"] = nlohmann::ordered_json::array();
    for (const auto& r : rows) {
      doc["metrics"].push_back({{"metric", r.metric}, {"unit", r.unit}, {"a", r.predicted}, {"b", r.measured},
                                {"change_pct", std::isfinite(r.error_pct) ? nlohmann::ordered_json(r.error_pct) : nlohmann::ordered_json()}});
    }
    doc["not_compared"] = one_sided_json(one_sided);
    std::cout << doc.dump(2) << "\n";
    return kOk;
  }
  std::cout << "what-if: B against A";
  if (changes.empty()) std::cout << " (the same scenario)";
  std::cout << "\n";
  for (const auto& c : changes) std::cout << "  " << c.key << ": " << (c.a.is_null() ? "(unset)" : c.a.dump()) << " -> "
                                          << (c.b.is_null() ? "(unset)" : c.b.dump()) << "\n";
  std::cout << "\n";
  print_comparison(std::cout, rows, "A", "B", "change");
  print_one_sided(std::cout, one_sided);
  return kOk;
}

}  // namespace

int cmd_compare(const Args& args) {
  po::options_description options("options");
  po::positional_options_description positional;
  options.add_options()
      ("predicted", po::value<std::string>(), "result JSON taken as the prediction")
      ("measured", po::value<std::string>(), "result JSON taken as the measurement")
      ("what-if", po::bool_switch(), "two what-ifs, of any plans: per metric A, B and B's change from A, and the scenario "
                                     "keys that differ")
      ("json", po::bool_switch(), "print the comparison as JSON");
  positional.add("predicted", 1).add("measured", 1);
  auto vm = parse_args(args, options, positional,
                       "usage: memtwin compare A.json B.json [--what-if] [--json]\n\n"
                       "Compares two saved results (memtwin run --json, or --out DIR's result.json) of the same\n"
                       "plan: per metric A, B and A's error against B. Refuses results of different plans;\n"
                       "--what-if compares any two: B's change from A, and which scenario keys differ.");
  if (!vm) return kOk;
  if (!vm->count("predicted") || !vm->count("measured")) throw UsageError("two result files are required");
  const nlohmann::json a = read_json((*vm)["predicted"].as<std::string>());
  const nlohmann::json b = read_json((*vm)["measured"].as<std::string>());
  if ((*vm)["what-if"].as<bool>()) return print_what_if(a, b, (*vm)["json"].as<bool>());
  try {
    require_same_plan(a, b);
  } catch (const UsageError& e) {
    throw UsageError(std::string(e.what()) + " as prediction and measurement; --what-if compares them as two what-ifs");
  }
  const auto rows = compare_results(a, b);
  if ((*vm)["json"].as<bool>()) {
    std::cout << nlohmann::ordered_json{{"plan_hash", *plan_hash_of(a)},
                                        {"metrics", comparison_json(rows)},
                                        {"not_compared", one_sided_json(one_sided_metrics(a, b))}}
                     .dump(2)
              << "\n";
  } else {
    print_comparison(std::cout, rows, a.value("backend", std::string("A")), b.value("backend", std::string("B")));
    print_one_sided(std::cout, one_sided_metrics(a, b));
  }
  return kOk;
}

}  // namespace memtwin::cli
