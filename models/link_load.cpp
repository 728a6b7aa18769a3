#include "models/link_load.h"

#include <algorithm>
#include <numeric>
#include <sstream>

namespace memtwin {

double LinkSeries::total_bytes() const { return std::accumulate(bytes.begin(), bytes.end(), 0.0); }

namespace {

double utilization(const LinkSeries& s, const LinkLoad& load, std::size_t i) {
  const double begin = i == 0 ? 0.0 : load.interval_end_s[i - 1];
  const double length = load.interval_end_s[i] - begin;
  return length > 0 && s.bandwidth > 0 ? s.bytes[i] / (s.bandwidth * length) : 0.0;
}

}  // namespace

std::string link_load_csv(const LinkLoad& load) {
  std::ostringstream out;
  out.precision(9);
  out << "time_s,link,direction,utilization,bytes\n";
  for (std::size_t i = 0; i < load.interval_end_s.size(); ++i) {
    for (const LinkSeries& s : load.links) {
      out << load.interval_end_s[i] << "," << s.link << "," << s.direction << "," << utilization(s, load, i) << "," << s.bytes[i]
          << "\n";
    }
  }
  return out.str();
}

nlohmann::ordered_json link_load_summary(const LinkLoad& load) {
  nlohmann::ordered_json out;
  out["links_used"] = load.links.size();
  out["intervals"] = load.interval_end_s.size();
  const auto busiest = std::max_element(load.links.begin(), load.links.end(),
                                        [](const LinkSeries& a, const LinkSeries& b) { return a.total_bytes() < b.total_bytes(); });
  if (busiest == load.links.end() || load.interval_end_s.empty()) return out;
  const double run_s = load.interval_end_s.back();
  double peak = 0;
  for (std::size_t i = 0; i < load.interval_end_s.size(); ++i) peak = std::max(peak, utilization(*busiest, load, i));
  out["busiest"] = {{"link", busiest->link},
                    {"direction", busiest->direction},
                    {"bytes", busiest->total_bytes()},
                    {"mean_utilization", run_s > 0 ? busiest->total_bytes() / (busiest->bandwidth * run_s) : 0.0},
                    {"peak_utilization", peak}};
  return out;
}

}  // namespace memtwin
