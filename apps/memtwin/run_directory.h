#pragma once
// A run's output directory (`--out DIR`): result.json and the backend's extra files (traces,
// timelines, per-request tables). Written by `memtwin run` and, per side, by `memtwin validate`.
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "models/result.h"

namespace memtwin::cli {

/// Writes `text` to `path`; throws naming the file when it cannot.
void write_text_file(const std::filesystem::path& path, const std::string& text);

/// Creates `dir` and writes the result document and the result's files into it; throws naming a
/// file that cannot be written.
void write_run_directory(const std::filesystem::path& dir, const nlohmann::ordered_json& document, const RunResult& result);

}  // namespace memtwin::cli
