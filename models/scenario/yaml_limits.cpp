#include "models/scenario/yaml_limits.h"

#include <filesystem>
#include <functional>

#include "models/scenario/scenario_error.h"

namespace memtwin {

void refuse_unreadable_yaml_file(const std::string& path, const SourceLocation& where, const std::string& key,
                                 const std::string& what) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) throw ScenarioError(where, key, "cannot read " + what + " " + path + " (does it exist?)");
  if (!std::filesystem::is_regular_file(status)) {
    throw ScenarioError(where, key, path + " is not a regular file (" + what + " must be a YAML file)");
  }
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxYamlFileBytes) {
    throw ScenarioError(where, key, path + " is " + std::to_string(size >> 20) + " MiB: " + what + " is at most " +
                                        std::to_string(kMaxYamlFileBytes >> 20) + " MiB");
  }
}

std::size_t first_invalid_utf8(std::string_view text) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  for (std::size_t i = 0; i < text.size();) {
    const unsigned char lead = byte(i);
    int length = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range (RFC 3629, table 3-7 of Unicode)
    if (lead < 0x80) {
      length = 1;
    } else if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) lo = 0xA0;  // no overlong forms
      if (lead == 0xED) hi = 0x9F;  // no surrogates
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
    } else {
      return i;
    }
    if (i + length > text.size()) return i;
    for (int k = 1; k < length; ++k) {
      const unsigned char c = byte(i + k);
      if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return i;
    }
    i += length;
  }
  return std::string_view::npos;
}

void refuse_unbounded_or_invalid_text(const YAML::Node& root, const std::string& file, std::size_t limit) {
  std::size_t visited = 0;
  const auto location = [&](const YAML::Node& node) {
    return SourceLocation{file, node.Mark().line + 1, node.Mark().column + 1};
  };
  // Depth-first, as the readers walk; stops at the limits, so the check itself is bounded (an alias
  // inside the node it names makes a cycle, which only the depth limit stops).
  constexpr int kMaxDepth = 64;
  std::function<void(const YAML::Node&, const std::string&, int)> walk = [&](const YAML::Node& node,
                                                                            const std::string& key, int depth) {
    if (depth > kMaxDepth) {
      throw ScenarioError(location(node), key.substr(0, key.find('[')),  // the path down would be 64 indices long
                          "the document nests deeper than " + std::to_string(kMaxDepth) +
                              " levels (an alias inside the node it names?)");
    }
    if (++visited > limit) {
      throw ScenarioError(location(node), key,
                          "the document expands to more than " + std::to_string(limit) +
                              " nodes (YAML aliases repeating a large mapping?); write the values out");
    }
    if (node.IsScalar()) {
      const std::size_t bad = first_invalid_utf8(node.Scalar());
      if (bad != std::string_view::npos) {
        throw ScenarioError(location(node), key,
                            "byte " + std::to_string(bad) + " of this text is not UTF-8 (save the file as UTF-8)");
      }
    } else if (node.IsMap()) {
      for (auto it = node.begin(); it != node.end(); ++it) {
        walk(it->first, key, depth + 1);
        const std::string name = it->first.IsScalar() ? it->first.Scalar() : "?";
        walk(it->second, key.empty() ? name : key + "." + name, depth + 1);
      }
    } else if (node.IsSequence()) {
      std::size_t index = 0;
      for (auto it = node.begin(); it != node.end(); ++it, ++index) {
        walk(*it, key + "[" + std::to_string(index) + "]", depth + 1);
      }
    }
  };
  walk(root, "", 0);
}

}  // namespace memtwin
