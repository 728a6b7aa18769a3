#include "apps/memtwin/text_report.h"

#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "models/unit_parse.h"

namespace memtwin::cli {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The unit is in the key's suffix, or in its section's ("breakdown_bytes.parameters").
std::string format_value(const std::string& path, const std::string& key, const nlohmann::ordered_json& v) {
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_number()) return v.dump();
  const double x = v.get<double>();
  if (ends_with(key, "_bytes") || path.find("_bytes.") != std::string::npos ||
      path.find("bytes_per_gpu.") != std::string::npos || ends_with(key, "bytes_per_token") ||
      ends_with(key, "bytes_per_token_uncompressed") || ends_with(key, "bytes_per_token_16bit") || key == "bytes") {
    return human_bytes(Bytes(static_cast<std::int64_t>(std::llround(x))));
  }
  if (ends_with(key, "_per_s")) return human_count(x) + "/s";
  if (ends_with(key, "_s")) return human_duration(Seconds(x));
  if (ends_with(key, "flops_per_token") || key == "parameters" || ends_with(key, "_parameters") ||
      ends_with(key, "parameters_per_layer") || ends_with(key, "_per_gpu")) {
    return human_count(x);
  }
  if (v.is_number_integer()) return std::to_string(v.get<long long>());
  std::ostringstream s;
  s << std::setprecision(6) << x;
  return s.str();
}

void print_section(std::ostream& out, const std::string& prefix, const nlohmann::ordered_json& node) {
  for (const auto& [key, value] : node.items()) {
    std::string path = prefix.empty() ? key : prefix + "." + key;
    if (value.is_object()) {
      print_section(out, path, value);
    } else if (value.is_array() && value.size() == 2 && value[0].is_number() && value[1].is_number()) {
      // A range ("step_s_interval": [lo, hi]) prints in the unit of the key it qualifies.
      std::string unit_key = key;
      if (ends_with(unit_key, "_interval")) unit_key.resize(unit_key.size() - 9);
      out << "  " << std::left << std::setw(46) << path << format_value(path, unit_key, value[0]) << " .. "
          << format_value(path, unit_key, value[1]) << "\n";
    } else if (value.is_array()) {
      continue;  // per-item arrays belong in --json or the output files
    } else {
      out << "  " << std::left << std::setw(46) << path << format_value(path, key, value) << "\n";
    }
  }
}

// --seeds: one line per metric, its mean and the interval of the mean, in the metric's own unit.
void print_seeds(std::ostream& out, const nlohmann::ordered_json& seeds) {
  const auto& values = seeds["values"];
  out << "\nseeds (" << values.size() << ": " << values.front().get<std::uint64_t>() << ".." << values.back().get<std::uint64_t>()
      << "; mean [" << std::llround(100 * seeds["confidence"].get<double>()) << "% interval of the mean])\n";
  int same = 0;
  for (const auto& [path, m] : seeds["metrics"].items()) {
    if (m["min"] == m["max"]) {  // listed in the JSON; here it would only repeat the result
      ++same;
      continue;
    }
    const std::string key = path.substr(path.rfind('.') + 1);
    out << "  " << std::left << std::setw(46) << path << format_value(path, key, m["mean"]) << " ["
        << format_value(path, key, m["ci_low"]) << " .. " << format_value(path, key, m["ci_high"]) << "]\n";
  }
  if (same > 0) out << "  (" << same << " more the same at every seed)\n";
}

// jobs: one line per link direction more than one job uses, with what it carried together.
void print_shared_links(std::ostream& out, const nlohmann::ordered_json& links) {
  out << "\nshared_links (used by more than one job; carried with the jobs together)\n";
  if (links.empty()) out << "  none: no link carries more than one job's traffic\n";
  for (const auto& link : links) {
    std::string jobs;
    for (const auto& j : link["jobs"]) jobs += (jobs.empty() ? "" : ", ") + j.get<std::string>();
    std::ostringstream utilization;
    utilization << std::setprecision(3) << 100 * link["utilization"].get<double>() << "% busy";
    out << "  " << std::left << std::setw(24) << link["link"].get<std::string>() + " " + link["direction"].get<std::string>()
        << std::setw(22) << jobs << std::setw(12) << format_value("", "bytes", link["bytes"]) << utilization.str() << "\n";
  }
}

}  // namespace

void print_text_report(std::ostream& out, const nlohmann::ordered_json& doc) {
  out << "memtwin " << doc.value("workload", "") << " scenario '" << doc.value("scenario", "") << "' (backend "
      << doc.value("backend", "") << ")\n";
  for (const auto& [key, value] : doc.items()) {
    if (!value.is_object() || key == "input") continue;
    if (key == "seeds") {
      print_seeds(out, value);
      continue;
    }
    if (key == "simulated" && doc.contains("shared_links")) print_shared_links(out, doc["shared_links"]);
    out << "\n" << key << "\n";
    print_section(out, key, value);
  }
  if (doc.contains("notes") && !doc["notes"].empty()) {
    out << "\nnotes\n";
    for (const auto& n : doc["notes"]) out << "  - " << n.get<std::string>() << "\n";
  }
}

}  // namespace memtwin::cli
