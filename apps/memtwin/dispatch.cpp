#include "apps/memtwin/dispatch.h"

#include <iostream>

#include <boost/program_options/errors.hpp>

#include "models/backend.h"
#include "models/scenario/scenario_error.h"

namespace memtwin::cli {

namespace {

void print_usage(const char* program, const std::map<std::string, Command>& commands, std::ostream& out) {
  out << "usage: " << program << " COMMAND [options]\n\n"
      << "memtwin predicts the memory and time of LLM training and serving from a YAML scenario.\n\n"
         "commands:\n";
  for (const auto& [name, cmd] : commands) out << "  " << name << std::string(10 - name.size(), ' ') << cmd.summary << "\n";
  out << "\n`" << program << " COMMAND --help` describes each command; `" << program << " --version` prints the version.\n"
      << "exit codes: 0 ok, 1 internal error, 2 bad input, 3 the scenario does not fit in memory\n";
}

}  // namespace

int dispatch(const char* program, int argc, char** argv, const std::map<std::string, Command>& commands) {
  std::vector<std::string> all(argv + 1, argv + argc);
  if (all.empty() || all[0] == "--help" || all[0] == "-h" || all[0] == "help") {
    print_usage(program, commands, std::cout);
    return all.empty() ? kBadInput : kOk;
  }
  if (all[0] == "--version" || all[0] == "version") {
    std::cout << program << " " << MEMTWIN_VERSION << "\n";
    return kOk;
  }
  auto it = commands.find(all[0]);
  if (it == commands.end()) {
    std::cerr << program << ": unknown command '" << all[0] << "'\n\n";
    print_usage(program, commands, std::cerr);
    return kBadInput;
  }
  const std::string where = std::string(program) + " " + all[0];
  Args rest(all.begin() + 1, all.end());
  try {
    return it->second.run(rest);
  } catch (const ScenarioError& e) {
    std::cerr << e.what() << "\n";
    return kBadInput;
  } catch (const Unsupported& e) {
    std::cerr << where << ": " << e.what() << "\n";
    return kBadInput;
  } catch (const UsageError& e) {
    std::cerr << where << ": " << e.what() << "\n(see `" << where << " --help`)\n";
    return kBadInput;
  } catch (const boost::program_options::error& e) {
    std::cerr << where << ": " << e.what() << "\n(see `" << where << " --help`)\n";
    return kBadInput;
  } catch (const std::exception& e) {
    std::cerr << where << ": internal error: " << e.what() << "\n";
    return kInternalError;
  }
}

}  // namespace memtwin::cli
