// memtwin: a digital twin for the memory and time of LLM training and serving.
#include "apps/memtwin/dispatch.h"

int main(int argc, char** argv) {
  using memtwin::cli::Command;
  static const std::map<std::string, Command> table = {
      {"run", {memtwin::cli::cmd_run, "predict memory and time for a scenario"}},
      {"check", {memtwin::cli::cmd_check, "validate a scenario without running it"}},
      {"fit", {memtwin::cli::cmd_fit, "the largest batch/context or smallest cluster that fits"}},
      {"kernels", {memtwin::cli::cmd_kernels, "KV formats: error, top-k overlap and bytes, measured"}},
      {"quality", {memtwin::cli::cmd_quality, "what each KV cache format costs in quality, on a real model"}},
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
  return memtwin::cli::dispatch("memtwin", argc, argv, table);
}
