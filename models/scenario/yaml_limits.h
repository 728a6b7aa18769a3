#pragma once
// A YAML document's aliases let a kilobyte name a mapping of a hundred million entries (each alias
// is the node it names, so walking the tree visits it again at every reference). Every reader
// walks its document whole, so each refuses, right after parsing, one whose walk would visit more
// than `limit` nodes.
#include <cstddef>
#include <string>

#include <yaml-cpp/yaml.h>

namespace memtwin {

/// Throws ScenarioError naming `file` and the line where the walk passed `limit` nodes.
void refuse_alias_expansion(const YAML::Node& root, const std::string& file, std::size_t limit = 200000);

}  // namespace memtwin
