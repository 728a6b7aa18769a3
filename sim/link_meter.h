#pragma once
// Samples how many bytes each direction of the platform's links carries, interval by interval,
// with SimGrid's link-load plugin (the integral of each link's usage, read by a daemon actor at
// each interval's end). Memory stays bounded: past kMaxIntervals the intervals merge in pairs and
// double in length, so a run of any duration keeps between half and all of kMaxIntervals.
//   LinkMeter::enable();                  // after make_engine(), before the platform is built
//   LinkMeter meter(platform.links, host);
//   engine->run();
//   LinkLoad load = meter.finish();
#include <vector>

#include <simgrid/s4u.hpp>

#include "models/link_load.h"

namespace memtwin::sim {

class LinkMeter {
 public:
  static constexpr double kFirstInterval = 0.01;  ///< seconds; doubles as the run outgrows the intervals
  static constexpr std::size_t kMaxIntervals = 256;

  /// Turns SimGrid's link-load plugin on: call once, before the links are created.
  static void enable();

  /// Tracks `links` from now on; the sampler runs as a daemon on `host` (it never keeps the
  /// simulation alive).
  LinkMeter(const std::vector<simgrid::s4u::SplitDuplexLink*>& links, simgrid::s4u::Host* host);

  /// After the engine has run: the last interval up to the clock, and the link directions that
  /// carried anything.
  LinkLoad finish();

 private:
  void sample(double at);
  void merge_pairs();

  std::vector<simgrid::s4u::Link*> directions_;  // up, down of each link
  std::vector<double> last_cumulative_;
  LinkLoad load_;  // every direction's series, filtered by finish()
  double interval_ = kFirstInterval;
};

}  // namespace memtwin::sim
