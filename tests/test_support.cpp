#include "tests/test_support.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace memtwin::test {

std::string source_path(const std::string& relative) { return std::string(MEMTWIN_SOURCE_DIR) + "/" + relative; }

std::vector<std::string> files_under(const std::string& relative_dir, const std::string& extension) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(source_path(relative_dir))) {
    if (entry.is_regular_file() && entry.path().extension() == extension) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

namespace {
std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

ProcessResult run_memtwin(const std::vector<std::string>& args) { return run_binary(MEMTWIN_BINARY, args); }

ProcessResult run_memtwin_device(const std::vector<std::string>& args) { return run_binary(MEMTWIN_DEVICE_BINARY, args); }

ProcessResult run_binary(const std::string& binary, const std::vector<std::string>& args) {
  static int counter = 0;
  auto dir = std::filesystem::temp_directory_path() / ("memtwin-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string out_file = (dir / ("out" + std::to_string(counter))).string();
  std::string err_file = (dir / ("err" + std::to_string(counter++))).string();
  std::string cmd = quote(binary);
  for (const auto& a : args) cmd += " " + quote(a);
  cmd += " >" + quote(out_file) + " 2>" + quote(err_file) + " </dev/null";
  int status = std::system(cmd.c_str());
  if (status == -1) throw std::runtime_error("cannot run " + cmd);
  ProcessResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out_file);
  r.err = slurp(err_file);
  std::filesystem::remove(out_file);
  std::filesystem::remove(err_file);
  return r;
}

std::vector<LinkUtilizationRow> read_link_utilization(const std::string& path) {
  std::ifstream csv(path);
  std::string line;
  if (!std::getline(csv, line) || line != "time_s,link,direction,utilization,bytes") {
    throw std::runtime_error(path + ": not a link_utilization.csv (header '" + line + "')");
  }
  std::vector<LinkUtilizationRow> rows;
  while (std::getline(csv, line)) {
    std::stringstream fields(line);
    std::string time, utilization, bytes;
    LinkUtilizationRow row;
    std::getline(fields, time, ',');
    std::getline(fields, row.link, ',');
    std::getline(fields, row.direction, ',');
    std::getline(fields, utilization, ',');
    std::getline(fields, bytes, ',');
    row.time_s = std::stod(time);
    row.utilization = std::stod(utilization);
    row.bytes = std::stod(bytes);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace memtwin::test
