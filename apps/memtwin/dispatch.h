#pragma once
// The command-line front door shared by `memtwin` and `memtwin-device`: a table of commands, the
// usage text, and the one place that turns errors into messages and exit codes (0 ok, 1 internal
// error, 2 bad input; commands return 3 themselves when a scenario does not fit).
#include <functional>
#include <map>
#include <string>

#include "apps/memtwin/commands.h"

namespace memtwin::cli {

struct Command {
  std::function<int(const Args&)> run;
  const char* summary;
};

/// Runs argv's command from `commands`; `program` names the binary in messages.
int dispatch(const char* program, int argc, char** argv, const std::map<std::string, Command>& commands);

}  // namespace memtwin::cli
