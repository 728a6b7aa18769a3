#include "apps/memtwin/run_directory.h"

#include <fstream>
#include <stdexcept>

namespace memtwin::cli {

void write_text_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream file(path);
  file << text;
  if (!file) throw std::runtime_error("cannot write " + path.string());
}

void write_run_directory(const std::filesystem::path& dir, const nlohmann::ordered_json& document, const RunResult& result) {
  std::filesystem::create_directories(dir);
  write_text_file(dir / "result.json", document.dump(2) + "\n");
  for (const auto& [name, content] : result.files) write_text_file(dir / name, content());
}

}  // namespace memtwin::cli
