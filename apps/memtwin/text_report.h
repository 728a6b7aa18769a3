#pragma once
// Human output of a result document: a readable table, units formatted from each key's suffix.
#include <iosfwd>

#include <nlohmann/json.hpp>

namespace memtwin::cli {

void print_text_report(std::ostream& out, const nlohmann::ordered_json& document);

}  // namespace memtwin::cli
