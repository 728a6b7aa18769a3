#include "apps/memtwin/comparison.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <set>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "apps/memtwin/commands.h"
#include "apps/memtwin/json_path.h"
#include "models/serving/iteration_ops.h"
#include "models/unit_parse.h"

namespace memtwin::cli {
namespace {

struct Compared {
  const char* metric;
  const char* unit;
};

// What a training step and a serving run are judged on: memory first, then time.
constexpr Compared kMetrics[] = {
    {"memory.gpu.peak_bytes", "bytes"},
    {"time.step_s", "s"},
    {"time.compute_s", "s"},
    {"time.comm_busy_s", "s"},
    {"latency_s.ttft.p50", "s"},
    {"latency_s.ttft.p99", "s"},
    {"latency_s.tpot.p50", "s"},
    {"latency_s.tpot.p99", "s"},
    {"throughput.output_tokens_per_s", "1/s"},
    {"kv_cache.peak_utilization", ""},
    {"requests.preemptions", ""},
    {"prefix_cache.hit_rate", ""},
};

std::string shown(double v, const std::string& unit) {
  if (unit == "bytes") return human_bytes(Bytes(static_cast<std::int64_t>(std::llround(v))));
  if (unit == "s") return human_duration(Seconds(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

}  // namespace

std::optional<std::string> plan_hash_of(const nlohmann::json& result) {
  for (const char* path : {"simulated.plan_hash", "executed.plan_hash"}) {
    const nlohmann::json* node = find_path(result, path);
    if (node && node->is_string()) return node->get<std::string>();
  }
  return std::nullopt;
}

namespace {

// A serving result's ops (simulated.iteration_ops or executed.iteration_ops), empty if it lists none.
std::set<std::string> iteration_ops_of(const nlohmann::json& result) {
  std::set<std::string> ops;
  for (const char* path : {"simulated.iteration_ops", "executed.iteration_ops"}) {
    const nlohmann::json* node = find_path(result, path);
    if (node && node->is_array())
      for (const auto& op : *node)
        if (op.is_string()) ops.insert(op.get<std::string>());
  }
  return ops;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

}  // namespace

void require_same_plan(const nlohmann::json& predicted, const nlohmann::json& measured) {
  const auto a = plan_hash_of(predicted), b = plan_hash_of(measured);
  if (!a || !b) throw UsageError("a result does not name the plan it ran (simulated.plan_hash or executed.plan_hash)");
  if (*a == *b) return;
  std::string why;
  const std::set<std::string> planned = iteration_ops_of(predicted), ran = iteration_ops_of(measured);
  if (!planned.empty() && !ran.empty() && planned != ran) {
    // A serving plan names its ops: say which differ, since that is where the engines disagree.
    std::vector<std::string> only_first, only_second;
    std::set_difference(planned.begin(), planned.end(), ran.begin(), ran.end(), std::back_inserter(only_first));
    std::set_difference(ran.begin(), ran.end(), planned.begin(), planned.end(), std::back_inserter(only_second));
    if (!only_first.empty()) why += "; only the first ran " + joined(only_first);
    if (!only_second.empty()) why += "; only the second ran " + joined(only_second);
  }
  throw UsageError("the results ran different plans (" + *a + " and " + *b + ")" + why + "; they are not comparable");
}

namespace {

// Every metric a comparison looks at: the list, then a serving run's compute by kind of work
// (models/serving/iteration_ops.h).
template <class Visit>
void for_each_compared_metric(Visit visit) {
  for (const auto& m : kMetrics) visit(std::string(m.metric), m.unit);
  for (const char* kind : kIterationOpNames) visit(std::string("op_time_s.") + kind, "s");
}

}  // namespace

std::vector<ComparedMetric> compare_results(const nlohmann::json& predicted, const nlohmann::json& measured) {
  std::vector<ComparedMetric> rows;
  for_each_compared_metric([&](const std::string& metric, const char* unit) {
    const auto p = number_at(predicted, metric), q = number_at(measured, metric);
    if (!p || !q) return;
    ComparedMetric row{metric, unit, *p, *q, 0};
    row.error_pct = *q != 0 ? (*p - *q) / *q * 100 : (*p == 0 ? 0 : INFINITY);
    rows.push_back(row);
  });
  return rows;
}

std::vector<OneSidedMetric> one_sided_metrics(const nlohmann::json& predicted, const nlohmann::json& measured) {
  std::vector<OneSidedMetric> out;
  for_each_compared_metric([&](const std::string& metric, const char*) {
    const bool p = number_at(predicted, metric).has_value(), q = number_at(measured, metric).has_value();
    if (p != q) out.push_back({metric, p ? "predicted" : "measured"});
  });
  return out;
}

void print_one_sided(std::ostream& out, const std::vector<OneSidedMetric>& metrics) {
  if (metrics.empty()) return;
  out << "not compared, in one result only:";
  for (const auto& m : metrics) out << " " << m.metric << " (" << m.only_in << ")";
  out << "\n";
}

nlohmann::ordered_json one_sided_json(const std::vector<OneSidedMetric>& metrics) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& m : metrics) list.push_back({{"metric", m.metric}, {"only_in", m.only_in}});
  return list;
}

std::vector<ComparedMetric> what_if_rows(const nlohmann::json& a, const nlohmann::json& b) {
  std::vector<ComparedMetric> rows = compare_results(b, a);  // B's error against A is its change from A
  for (auto& r : rows) std::swap(r.predicted, r.measured);
  return rows;
}

namespace {

void collect_changes(const nlohmann::json& a, const nlohmann::json& b, const std::string& path, std::vector<InputChange>& out) {
  if (a.is_object() && b.is_object()) {
    std::set<std::string> keys;
    for (const auto& [k, v] : a.items()) keys.insert(k);
    for (const auto& [k, v] : b.items()) keys.insert(k);
    for (const auto& k : keys) {
      const std::string at = path.empty() ? k : path + "." + k;
      const bool in_a = a.contains(k), in_b = b.contains(k);
      if (in_a && in_b) collect_changes(a[k], b[k], at, out);
      else out.push_back({at, in_a ? a[k] : nlohmann::json(), in_b ? b[k] : nlohmann::json()});
    }
  } else if (a != b) {
    out.push_back({path, a, b});
  }
}

}  // namespace

std::vector<InputChange> input_changes(const nlohmann::json& a, const nlohmann::json& b) {
  std::vector<InputChange> out;
  collect_changes(a.value("input", nlohmann::json::object()), b.value("input", nlohmann::json::object()), "", out);
  return out;
}

void print_comparison(std::ostream& out, const std::vector<ComparedMetric>& rows, const std::string& predicted_label,
                      const std::string& measured_label, const std::string& error_label) {
  char line[256];
  std::snprintf(line, sizeof line, "%-32s %14s %14s %9s\n", "metric", predicted_label.c_str(), measured_label.c_str(), error_label.c_str());
  out << line;
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "%-32s %14s %14s %+8.1f%%\n", r.metric.c_str(), shown(r.predicted, r.unit).c_str(),
                  shown(r.measured, r.unit).c_str(), r.error_pct);
    out << line;
  }
}

nlohmann::ordered_json comparison_json(const std::vector<ComparedMetric>& rows) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& r : rows) {
    list.push_back({{"metric", r.metric}, {"unit", r.unit}, {"predicted", r.predicted}, {"measured", r.measured},
                    {"error_pct", std::isfinite(r.error_pct) ? nlohmann::ordered_json(r.error_pct) : nlohmann::ordered_json(nullptr)}});
  }
  return list;
}

}  // namespace memtwin::cli
