#include "hw/process_memory.h"

#include <fstream>
#include <string>

namespace memtwin::hw {
namespace {
std::int64_t status_kib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  }
  return 0;
}
}  // namespace

std::int64_t resident_bytes() { return status_kib("VmRSS"); }
std::int64_t peak_resident_bytes() { return status_kib("VmHWM"); }

bool reset_peak_resident() {
  std::ofstream refs("/proc/self/clear_refs");
  refs << "5";
  refs.flush();
  return static_cast<bool>(refs);
}

}  // namespace memtwin::hw
