#pragma once
// Link utilisation over time, as a simulator measures it: the bytes each direction of each link
// carried in consecutive intervals, and the report made of them (a CSV for figures, a summary for
// the result). The simulator fills it (sim/link_meter.h); nothing here knows SimGrid. The bytes are
// SimGrid's link-load integral (each link's load as read at the flows' starts and ends): within
// 0.1% of the bytes the flows carried on the disaggregated example (a test).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace memtwin {

struct LinkSeries {
  std::string link;       ///< the platform's name: node0.nic1, node1.uplink, node0.gpu1.intra
  std::string direction;  ///< up (towards the fabric or away from the GPU) or down
  double bandwidth = 0;   ///< bytes per second
  std::vector<double> bytes;  ///< carried in each interval, aligned with LinkLoad::interval_end_s
  [[nodiscard]] double total_bytes() const;
};

struct LinkLoad {
  /// The end of each sampled interval; the first starts at 0, the last ends with the run.
  std::vector<double> interval_end_s;
  std::vector<LinkSeries> links;  ///< link directions that carried anything, in platform order
};

/// time_s (an interval's end), link, direction, utilization (the interval's bytes over its
/// bandwidth x length), bytes.
std::string link_load_csv(const LinkLoad& load);

/// The busiest link direction (most bytes): its name, its mean utilisation over the run and its
/// peak over the intervals; and how many link directions carried anything.
nlohmann::ordered_json link_load_summary(const LinkLoad& load);

}  // namespace memtwin
