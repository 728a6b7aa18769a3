#pragma once
// Predicted against measured: the metrics both result documents hold, with the error of the
// prediction in percent of the measurement. Shared by `memtwin validate` (sim against hw on one
// plan) and `memtwin compare` (two saved results), which refuse results of different plans.
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace memtwin::cli {

inline constexpr const char* kValidationSchema = "memtwin.validation/1";

struct ComparedMetric {
  std::string metric;  ///< dotted path in memtwin.result/1
  std::string unit;    ///< "bytes", "s"
  double predicted = 0, measured = 0;
  double error_pct = 0;  ///< (predicted - measured) / measured x 100
};

/// The plan a result ran ("simulated.plan_hash" or "executed.plan_hash"), if it says.
std::optional<std::string> plan_hash_of(const nlohmann::json& result);

/// Throws UsageError when both results name their plan and the plans differ, or neither does.
void require_same_plan(const nlohmann::json& predicted, const nlohmann::json& measured);

/// Every metric of the comparison list that both results hold.
std::vector<ComparedMetric> compare_results(const nlohmann::json& predicted, const nlohmann::json& measured);

/// A metric of the comparison list that only one result holds: said, never skipped silently.
struct OneSidedMetric {
  std::string metric;
  std::string only_in;  ///< "predicted" or "measured" (the first or second result)
};
std::vector<OneSidedMetric> one_sided_metrics(const nlohmann::json& predicted, const nlohmann::json& measured);
/// "not compared, in one result only: ..." (nothing when every metric was compared).
void print_one_sided(std::ostream& out, const std::vector<OneSidedMetric>& metrics);
/// [{"metric", "only_in"}...]
nlohmann::ordered_json one_sided_json(const std::vector<OneSidedMetric>& metrics);

void print_comparison(std::ostream& out, const std::vector<ComparedMetric>& rows, const std::string& predicted_label,
                      const std::string& measured_label);

nlohmann::ordered_json comparison_json(const std::vector<ComparedMetric>& rows);

}  // namespace memtwin::cli
