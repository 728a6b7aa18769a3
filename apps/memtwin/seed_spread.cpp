#include "apps/memtwin/seed_spread.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <boost/math/distributions/students_t.hpp>

#include "apps/memtwin/commands.h"

namespace memtwin::cli {
namespace {

// The sections whose numbers depend on the draw of the workload (the memory, the KV geometry and
// the plan do not).
const std::vector<std::string> kSections = {"latency_s", "throughput", "goodput", "requests", "load"};

void collect(const nlohmann::ordered_json& node, const std::string& path, std::map<std::string, double>& out) {
  if (node.is_object()) {
    for (const auto& [key, value] : node.items()) collect(value, path + "." + key, out);
  } else if (node.is_number()) {
    out[path] = node.get<double>();
  }
}

std::map<std::string, double> numbers_of(const nlohmann::ordered_json& result) {
  std::map<std::string, double> out;
  for (const auto& section : kSections)
    if (result.contains(section)) collect(result[section], section, out);
  if (result.contains("kv_cache") && result["kv_cache"].contains("peak_utilization") && result["kv_cache"]["peak_utilization"].is_number())
    out["kv_cache.peak_utilization"] = result["kv_cache"]["peak_utilization"].get<double>();
  return out;
}

}  // namespace

std::vector<std::uint64_t> seeds_to_run(std::uint64_t first, int count) {
  if (count < 1 || count > 1000) throw UsageError("--seeds must be from 1 to 1000 (each seed is a full run), not " + std::to_string(count));
  if (first > std::numeric_limits<std::uint64_t>::max() - static_cast<std::uint64_t>(count))
    throw UsageError("--seeds: the scenario's seed " + std::to_string(first) + " leaves no room for " + std::to_string(count) + " more");
  std::vector<std::uint64_t> seeds;
  for (int i = 0; i < count; ++i) seeds.push_back(first + static_cast<std::uint64_t>(i));
  return seeds;
}

nlohmann::ordered_json spread_of(const std::vector<double>& values) {
  const auto n = static_cast<double>(values.size());
  double mean = 0;
  for (double v : values) mean += v;
  mean /= n;
  double squares = 0;
  for (double v : values) squares += (v - mean) * (v - mean);
  const double stddev = std::sqrt(squares / (n - 1));
  const boost::math::students_t t(n - 1);
  const double half = boost::math::quantile(boost::math::complement(t, (1 - kSeedConfidence) / 2)) * stddev / std::sqrt(n);
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  return {{"mean", mean}, {"stddev", stddev}, {"ci_low", mean - half}, {"ci_high", mean + half}, {"min", *lo}, {"max", *hi}};
}

nlohmann::ordered_json seed_spread(const std::vector<std::uint64_t>& seeds, const std::vector<nlohmann::ordered_json>& results) {
  if (results.size() < 2 || results.size() != seeds.size()) throw std::logic_error("seed_spread: one result per seed, two or more");
  std::vector<std::map<std::string, double>> numbers;
  for (const auto& r : results) numbers.push_back(numbers_of(r));
  nlohmann::ordered_json metrics = nlohmann::ordered_json::object();
  for (const auto& [path, first] : numbers.front()) {
    std::vector<double> values;
    for (const auto& n : numbers) {
      auto it = n.find(path);
      if (it == n.end()) break;
      values.push_back(it->second);
    }
    if (values.size() == numbers.size()) metrics[path] = spread_of(values);
  }
  return {{"values", seeds},
          {"confidence", kSeedConfidence},
          {"method", "the scenario run once per seed; mean, sample standard deviation and the Student-t interval of the "
                     "mean over the seeds (mean +- t(0.975, n-1) x stddev / sqrt(n))"},
          {"metrics", metrics}};
}

}  // namespace memtwin::cli
