#pragma once
// Bounds on the YAML documents memtwin reads (scenarios, calibration files, HF configs).
// A path that is not a regular file (a directory, /dev/zero, a FIFO) or is larger than a
// document of its kind can be is refused before reading, so reading never blocks or fills memory.
// A YAML document's aliases let a kilobyte name a mapping of a hundred million entries (each alias
// is the node it names, so walking the tree visits it again at every reference). Every reader
// walks its document whole, so each refuses, right after parsing, one whose walk would visit more
// than `limit` nodes. The same walk refuses text that is not UTF-8 (yaml-cpp passes such bytes
// through; the JSON result of a run could not be written with them).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <yaml-cpp/yaml.h>

#include "models/scenario/scenario_error.h"

namespace memtwin {

/// The largest YAML document a reader opens: scenarios, calibrations and configs are kilobytes.
inline constexpr std::uintmax_t kMaxYamlFileBytes = 16u << 20;

/// Throws ScenarioError at `where` (naming `key`) unless `path` is a regular file of at most
/// kMaxYamlFileBytes. `what` names the kind of file in the message ("the scenario file").
void refuse_unreadable_yaml_file(const std::string& path, const SourceLocation& where, const std::string& key,
                                 const std::string& what);

/// Throws ScenarioError naming `file` and the line where the walk passed `limit` nodes or 64 levels
/// of nesting, or the line and key of the first key or value that is not valid UTF-8.
void refuse_unbounded_or_invalid_text(const YAML::Node& root, const std::string& file, std::size_t limit = 200000);

/// The byte offset of the first byte of `text` that does not begin a well-formed UTF-8 sequence
/// (overlong forms, surrogates and code points past U+10FFFF included), or npos when it is valid.
std::size_t first_invalid_utf8(std::string_view text);

}  // namespace memtwin
