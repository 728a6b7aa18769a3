#include "models/scenario/did_you_mean.h"

#include <algorithm>
#include <numeric>

namespace memtwin {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  // A name the word starts (a truncated catalog name, "h100" for "h100-sxm") is the best guess.
  if (word.size() >= 2) {
    for (const auto& c : candidates) {
      if (c.size() > word.size() && c.compare(0, word.size(), word) == 0) return " (did you mean '" + c + "'?)";
    }
  }
  std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  const std::string* best = nullptr;
  std::size_t best_distance = limit + 1;
  for (const auto& c : candidates) {
    std::size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = &c;
    }
  }
  return best ? " (did you mean '" + *best + "'?)" : "";
}

}  // namespace memtwin
