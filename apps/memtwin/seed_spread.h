#pragma once
// `--seeds N`: how far a serving answer moves with the random workload. The same scenario is run
// at N consecutive seeds (its own seed first); each metric that depends on the draw gets the mean,
// the sample standard deviation and a Student-t confidence interval of the mean over the seeds.
// The answer at the scenario's own seed stays the result; this is a section beside it.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace memtwin::cli {

/// The confidence of the interval `seed_spread` reports.
inline constexpr double kSeedConfidence = 0.95;

/// The seeds --seeds N runs: `first`, first + 1, ..., first + N - 1. Throws UsageError unless
/// 1 <= N <= 1000 (each is a full run) or when the seeds would overflow.
std::vector<std::uint64_t> seeds_to_run(std::uint64_t first, int count);

/// The result section `seeds` (schema: docs/schema/result.schema.json): `values` (the seeds),
/// `confidence`, `method`, and `metrics`, keyed by dotted result path, with mean, stddev, ci_low,
/// ci_high, min and max over `results` (one result document per seed, in seed order). The paths
/// are every number under latency_s, throughput, goodput, requests and load, and
/// kv_cache.peak_utilization, that every result has. Needs two results or more.
nlohmann::ordered_json seed_spread(const std::vector<std::uint64_t>& seeds, const std::vector<nlohmann::ordered_json>& results);

/// Mean, stddev and the confidence interval of the mean of `values` (two or more), as the
/// `metrics` entries of seed_spread hold them.
nlohmann::ordered_json spread_of(const std::vector<double>& values);

}  // namespace memtwin::cli
