#pragma once
// Files compiled into the binary (the catalogs and the quick-start scenario), so that memtwin
// runs from any directory. The build generates embedded_files.cpp from scenarios/.
#include <optional>
#include <string_view>

namespace memtwin {

/// The text of an embedded file by its path under scenarios/ ("presets/gpus.yaml"), or nothing.
std::optional<std::string_view> embedded_file(std::string_view name);

}  // namespace memtwin
