// memtwin: a digital twin for the memory and time of LLM training and serving.
#include <iostream>
#include <map>
#include <functional>

#include <boost/program_options/errors.hpp>

#include "apps/memtwin/commands.h"
#include "models/backend.h"
#include "models/scenario/scenario_error.h"

namespace {

using memtwin::cli::Args;

struct Command {
  std::function<int(const Args&)> run;
  const char* summary;
};

const std::map<std::string, Command>& commands() {
  static const std::map<std::string, Command> table = {
      {"run", {memtwin::cli::cmd_run, "predict memory and time for a scenario"}},
      {"check", {memtwin::cli::cmd_check, "validate a scenario without running it"}},
      {"fit", {memtwin::cli::cmd_fit, "the largest batch/context or smallest cluster that fits"}},
      {"kernels", {memtwin::cli::cmd_kernels, "KV formats: error, top-k overlap and bytes, measured"}},
      {"sweep", {memtwin::cli::cmd_sweep, "run a grid of what-ifs in parallel, resumable"}},
      {"report", {memtwin::cli::cmd_report, "an HTML report with figures for a run, sweep, plan or validation"}},
      {"plan", {memtwin::cli::cmd_plan, "the cheapest configuration that fits and meets the targets"}},
      {"calibrate", {memtwin::cli::cmd_calibrate, "measure this machine's device and write a calibration file"}},
      {"validate", {memtwin::cli::cmd_validate, "run sim and hw on the same plan: predicted, measured, error"}},
      {"compare", {memtwin::cli::cmd_compare, "predicted, measured and error between two saved results"}},
      {"schema", {memtwin::cli::cmd_schema, "print the scenario language reference"}},
      {"models", {memtwin::cli::cmd_models, "list the model catalog"}},
      {"gpus", {memtwin::cli::cmd_gpus, "list the GPU catalog"}},
  };
  return table;
}

void print_usage(std::ostream& out) {
  out << "usage: memtwin COMMAND [options]\n\n"
         "memtwin predicts the memory and time of LLM training and serving from a YAML scenario.\n\n"
         "commands:\n";
  for (const auto& [name, cmd] : commands()) out << "  " << name << std::string(10 - name.size(), ' ') << cmd.summary << "\n";
  out << "\n`memtwin COMMAND --help` describes each command.\n"
         "exit codes: 0 ok, 1 internal error, 2 bad input, 3 the scenario does not fit in memory\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> all(argv + 1, argv + argc);
  if (all.empty() || all[0] == "--help" || all[0] == "-h" || all[0] == "help") {
    print_usage(std::cout);
    return all.empty() ? memtwin::cli::kBadInput : memtwin::cli::kOk;
  }
  auto it = commands().find(all[0]);
  if (it == commands().end()) {
    std::cerr << "memtwin: unknown command '" << all[0] << "'\n\n";
    print_usage(std::cerr);
    return memtwin::cli::kBadInput;
  }
  Args rest(all.begin() + 1, all.end());
  try {
    return it->second.run(rest);
  } catch (const memtwin::ScenarioError& e) {
    std::cerr << e.what() << "\n";
    return memtwin::cli::kBadInput;
  } catch (const memtwin::Unsupported& e) {
    std::cerr << "memtwin " << all[0] << ": " << e.what() << "\n";
    return memtwin::cli::kBadInput;
  } catch (const memtwin::cli::UsageError& e) {
    std::cerr << "memtwin " << all[0] << ": " << e.what() << "\n(see `memtwin " << all[0] << " --help`)\n";
    return memtwin::cli::kBadInput;
  } catch (const boost::program_options::error& e) {
    std::cerr << "memtwin " << all[0] << ": " << e.what() << "\n(see `memtwin " << all[0] << " --help`)\n";
    return memtwin::cli::kBadInput;
  } catch (const std::exception& e) {
    std::cerr << "memtwin " << all[0] << ": internal error: " << e.what() << "\n";
    return memtwin::cli::kInternalError;
  }
}
