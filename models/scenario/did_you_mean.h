#pragma once
// Suggestions for misspelt keys and names.
#include <string>
#include <string_view>
#include <vector>

namespace memtwin {

/// Levenshtein distance between two strings (ASCII, case-sensitive).
std::size_t edit_distance(std::string_view a, std::string_view b);

/// " (did you mean 'x'?)" for the closest candidate within a third of the word's length (at least
/// two edits), or "" when nothing is close.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace memtwin
