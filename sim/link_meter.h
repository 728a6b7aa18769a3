#pragma once
// Samples how many bytes each direction of the platform's links carries, interval by interval,
// with SimGrid's link-load plugin (the integral of each link's usage, read by a daemon actor at
// each interval's end). Memory stays bounded: past kMaxIntervals the intervals merge in pairs and
// double in length, so a run of any duration keeps between half and all of kMaxIntervals.
//   LinkMeter::enable();                  // after make_engine(), before the platform is built
//   LinkCounters counters(platform.links);
//   LinkMeter meter(counters, host);
//   engine->run();
//   LinkLoad load = meter.finish();
#include <vector>

#include <simgrid/s4u.hpp>

#include "models/link_load.h"

namespace memtwin::sim {

/// What every direction of some links has carried so far, as SimGrid's link-load plugin integrates
/// it (LinkMeter::enable() first): read at chosen instants, their differences are each period's
/// bytes. One per link for the whole run (the plugin tracks a link once).
class LinkCounters {
 public:
  explicit LinkCounters(const std::vector<simgrid::s4u::SplitDuplexLink*>& links);
  /// Bytes so far, by direction: up then down of each link, in `links` order.
  [[nodiscard]] std::vector<double> read() const;
  /// Each direction's name, direction and bandwidth (its bytes left empty).
  [[nodiscard]] const std::vector<LinkSeries>& directions() const { return series_; }

 private:
  std::vector<simgrid::s4u::Link*> directions_;
  std::vector<LinkSeries> series_;
};

class LinkMeter {
 public:
  static constexpr double kFirstInterval = 0.01;  ///< seconds; doubles as the run outgrows the intervals
  static constexpr std::size_t kMaxIntervals = 256;

  /// Turns SimGrid's link-load plugin on: call once, before the links are created.
  static void enable();

  /// Samples `counters`' links from now on (the clock at construction is the series' 0: construct it
  /// inside an actor to meter one phase of a run); the sampler runs as a daemon on `host` (it never
  /// keeps the simulation alive). `counters` outlives the meter.
  LinkMeter(const LinkCounters& counters, simgrid::s4u::Host* host);

  /// The last interval up to the clock, and the link directions that carried anything since the
  /// meter was made (after the engine has run, or at the end of the phase it meters).
  LinkLoad finish();

 private:
  void sample(double at);
  void merge_pairs();

  const LinkCounters& counters_;
  double origin_;  // the clock when the meter was made
  std::vector<double> last_cumulative_;
  LinkLoad load_;  // every direction's series, filtered by finish()
  double interval_ = kFirstInterval;
};

}  // namespace memtwin::sim
