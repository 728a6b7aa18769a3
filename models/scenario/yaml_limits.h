#pragma once
// Bounds on the YAML documents memtwin reads (scenarios, calibration files, HF configs).
// A path that is not a regular file (a directory, /dev/zero, a FIFO) or is larger than a
// document of its kind can be is refused before reading, so reading never blocks or fills memory.
// A YAML document's aliases let a kilobyte name a mapping of a hundred million entries (each alias
// is the node it names, so walking the tree visits it again at every reference). Every reader
// walks its document whole, so each refuses, right after parsing, one whose walk would visit more
// than `limit` nodes.
#include <cstddef>
#include <cstdint>
#include <string>

#include <yaml-cpp/yaml.h>

#include "models/scenario/scenario_error.h"

namespace memtwin {

/// The largest YAML document a reader opens: scenarios, calibrations and configs are kilobytes.
inline constexpr std::uintmax_t kMaxYamlFileBytes = 16u << 20;

/// Throws ScenarioError at `where` (naming `key`) unless `path` is a regular file of at most
/// kMaxYamlFileBytes. `what` names the kind of file in the message ("the scenario file").
void refuse_unreadable_yaml_file(const std::string& path, const SourceLocation& where, const std::string& key,
                                 const std::string& what);

/// Throws ScenarioError naming `file` and the line where the walk passed `limit` nodes.
void refuse_alias_expansion(const YAML::Node& root, const std::string& file, std::size_t limit = 200000);

}  // namespace memtwin
