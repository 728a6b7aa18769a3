#pragma once
// Predicted against measured: the metrics both result documents hold, with the error of the
// prediction in percent of the measurement. Shared by `memtwin validate` (sim against hw on one
// plan) and `memtwin compare` (two saved results), which refuse results of different plans unless
// asked for a what-if: B's change from A, with the scenario keys that differ.
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
                      const std::string& measured_label, const std::string& error_label = "error");

nlohmann::ordered_json comparison_json(const std::vector<ComparedMetric>& rows);

/// A what-if (compare --what-if): two results of any plans, B against A. Each row's `predicted` is
/// A, `measured` is B and `error_pct` is B's change from A, (B - A) / A x 100.
std::vector<ComparedMetric> what_if_rows(const nlohmann::json& a, const nlohmann::json& b);

/// A key of the resolved scenarios (the results' `input`) whose value differs: what the what-if
/// changed. `a` or `b` is null where only the other result has the key.
struct InputChange {
  std::string key;  ///< dotted path, "training.micro_batch"
  nlohmann::json a, b;
};
std::vector<InputChange> input_changes(const nlohmann::json& a, const nlohmann::json& b);

}  // namespace memtwin::cli
