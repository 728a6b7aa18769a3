// memtwin-device: the measuring half of memtwin, without SimGrid, for a machine that has the device
// but cannot install memtwin's build dependencies (a lent GPU machine): run a scenario on the
// hardware (or the analytic model), calibrate the device, check scenarios. Its results go back to
// `memtwin compare` next to the simulated ones; the plan hash keeps that comparison honest.
#include "apps/memtwin/dispatch.h"

int main(int argc, char** argv) {
  using memtwin::cli::Command;
  static const std::map<std::string, Command> table = {
      {"run", {memtwin::cli::cmd_run, "measure a scenario on the device (--backend hw, the default here)"}},
      {"check", {memtwin::cli::cmd_check, "validate a scenario without running it"}},
      {"calibrate", {memtwin::cli::cmd_calibrate, "measure this machine's device and write a calibration file"}},
      {"schema", {memtwin::cli::cmd_schema, "print the scenario language reference"}},
      {"models", {memtwin::cli::cmd_models, "list the model catalog"}},
      {"gpus", {memtwin::cli::cmd_gpus, "list the GPU catalog"}},
  };
  return memtwin::cli::dispatch("memtwin-device", argc, argv, table);
}
