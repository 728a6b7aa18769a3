#include "apps/memtwin/run_directory.h"

#include <fstream>
#include <stdexcept>

namespace memtwin::cli {

void write_run_directory(const std::filesystem::path& dir, const nlohmann::ordered_json& document, const RunResult& result) {
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& content) {
    std::ofstream file(dir / name);
    file << content;
    if (!file) throw std::runtime_error("cannot write " + (dir / name).string());
  };
  write("result.json", document.dump(2) + "\n");
  for (const auto& [name, content] : result.files) write(name, content);
}

}  // namespace memtwin::cli
