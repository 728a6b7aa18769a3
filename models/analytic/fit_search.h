#pragma once
// The inverse question: the largest value of a knob that still fits (micro-batch, sequence length,
// context, batch of sequences), or the smallest that does (nodes, GPUs per node). Memory grows
// monotonically with the first kind and falls with the second, so bisection answers in O(log n)
// evaluations; values the scenario rejects (a global batch the new size does not divide) are
// skipped, not treated as a failure to fit.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace memtwin {

enum class FitDirection { largest, smallest };

enum class Probe { fits, does_not_fit, invalid };

struct FitAnswer {
  std::optional<std::int64_t> value;  ///< empty when no value in range fits
  std::optional<std::int64_t> first_failing;  ///< the neighbour that does not fit (for the message)
  int evaluations = 0;
};

/// Searches [lo, hi] for the extreme value where `probe` says fits.
FitAnswer fit_search(const std::function<Probe(std::int64_t)>& probe, std::int64_t lo, std::int64_t hi,
                     FitDirection direction);

/// The natural direction and upper bound of a well-known key, if it is one.
std::optional<FitDirection> default_fit_direction(const std::string& key);

}  // namespace memtwin
