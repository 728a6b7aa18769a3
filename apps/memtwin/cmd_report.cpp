// memtwin report: hands over to the Python analysis package (analysis/memtwin_analysis), which
// reads only result files and draws with matplotlib.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "apps/memtwin/commands.h"

namespace memtwin::cli {

int cmd_report(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << "usage: memtwin report INPUT --out report.html [--png-dir DIR]\n\n"
                 "One self-contained HTML file (images embedded) for a run directory (memtwin run --out DIR),\n"
                 "a result JSON file, a sweep directory (memtwin sweep --out DIR) or a plan (memtwin plan --json\n"
                 "capture; its rate search as a load curve) or a validation (memtwin validate --out DIR, or its\n"
                 "validation.json: errors per metric, both sides' memory or latency) or a KV-quality measurement\n"
                 "(memtwin quality --json capture: quality against bytes and time per token). Needs python3 with\n"
                 "matplotlib (scripts/dev.sh installs Debian's python3-matplotlib); MEMTWIN_PYTHON picks the\n"
                 "interpreter.\n";
    return args.empty() ? kBadInput : kOk;
  }
  std::string python = "python3";
  if (const char* chosen = std::getenv("MEMTWIN_PYTHON")) {
    python = chosen;
  } else if (std::filesystem::exists("/usr/bin/python3")) {
    python = "/usr/bin/python3";  // Debian's, where python3-matplotlib is installed
  }
  const std::string analysis = MEMTWIN_ANALYSIS_DIR;
  if (!std::filesystem::exists(analysis + "/memtwin_analysis/__main__.py")) {
    throw UsageError("the analysis package is not at " + analysis);
  }
  const char* old = std::getenv("PYTHONPATH");
  std::string path = analysis;
  if (old && *old) {
    path += ':';
    path += old;
  }
  setenv("PYTHONPATH", path.c_str(), 1);
  std::vector<std::string> argv_s = {python, "-m", "memtwin_analysis", "report"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::cerr << "memtwin report: cannot run " << python << " (install python3 and python3-matplotlib)\n";
  return kBadInput;
}

}  // namespace memtwin::cli
