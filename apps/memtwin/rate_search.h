#pragma once
// "The highest request rate this serving configuration sustains under the SLO": a bracketing
// search over inference.workload.rate. Each probe is a `memtwin run` of the configuration at one
// rate; a probe passes when the run succeeds, the load is sustainable and every requirement holds.
// Latency grows with load, so passing is taken as monotone in the rate: the search keeps the
// highest passing rate below the lowest failing one and narrows that bracket geometrically,
// `jobs` probes per round, until the two are within `tolerance` of each other.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/memtwin/requirements.h"
#include "models/scenario.h"

namespace memtwin::cli {

struct RateProbe {
  double rate_per_s = 0;
  std::string failure;  ///< empty: passed
  nlohmann::json result;
};

struct RateSearch {
  std::optional<double> sustained_per_s;     ///< highest passing rate; empty when even the lowest fails
  std::optional<double> first_failing_per_s; ///< lowest failing rate; empty when even the highest passes
  std::string failure;                       ///< why the first failing rate failed
  std::vector<RateProbe> probes;             ///< every probe, by rate
};

/// Parses "LO..HI" with rates such as "1/s..64/s" or bare numbers (per second); LO < HI.
std::pair<double, double> parse_rate_range(const std::string& text);

/// Throws UsageError unless the scenario serves requests arriving open-loop at a rate.
void check_rate_searchable(const Scenario& s);

/// The scenario's inference.slo as requirements on a run's p99 latencies ("latency_s.ttft.p99 <=
/// 1"): what a rate is judged by when the user gives no --require of their own.
std::vector<Requirement> slo_requirements(const Scenario& s);

/// Searches [lo, hi] for the configuration `overrides` of `scenario` (a serving scenario whose
/// arrivals are open-loop). Throws UsageError when the scenario cannot take a rate.
RateSearch search_max_rate(const std::string& scenario, const std::string& backend, const std::vector<std::string>& overrides,
                           const std::vector<Requirement>& requirements, double lo, double hi, int jobs,
                           const std::filesystem::path& scratch, double tolerance = 0.02);

}  // namespace memtwin::cli
