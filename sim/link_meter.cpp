#include "sim/link_meter.h"

#include <simgrid/plugins/load.h>

namespace memtwin::sim {

namespace sg4 = simgrid::s4u;

void LinkMeter::enable() { sg_link_load_plugin_init(); }

LinkCounters::LinkCounters(const std::vector<sg4::SplitDuplexLink*>& links) {
  for (sg4::SplitDuplexLink* link : links) {
    for (const auto& [direction, one_way] : {std::pair{"up", link->get_link_up()}, std::pair{"down", link->get_link_down()}}) {
      sg_link_load_track(one_way);
      directions_.push_back(one_way);
      series_.push_back({link->get_name(), direction, one_way->get_bandwidth(), {}});
    }
  }
}

std::vector<double> LinkCounters::read() const {
  std::vector<double> bytes;
  bytes.reserve(directions_.size());
  for (sg4::Link* one_way : directions_) bytes.push_back(sg_link_get_cum_load(one_way));
  return bytes;
}

LinkMeter::LinkMeter(const LinkCounters& counters, sg4::Host* host)
    : counters_(counters), origin_(sg4::Engine::get_clock()), last_cumulative_(counters_.read()) {
  load_.links = counters_.directions();
  sg4::Actor::create("link_meter", host, [this] {
    for (;;) {
      const double end = (load_.interval_end_s.empty() ? 0.0 : load_.interval_end_s.back()) + interval_;
      sg4::this_actor::sleep_until(origin_ + end);
      sample(end);
    }
  })->daemonize();
}

void LinkMeter::sample(double at) {
  load_.interval_end_s.push_back(at);
  const std::vector<double> cumulative = counters_.read();
  for (std::size_t i = 0; i < cumulative.size(); ++i) {
    load_.links[i].bytes.push_back(cumulative[i] - last_cumulative_[i]);
    last_cumulative_[i] = cumulative[i];
  }
  if (load_.interval_end_s.size() >= kMaxIntervals) merge_pairs();
}

void LinkMeter::merge_pairs() {
  auto halve = [](auto& values, auto combine) {
    const std::size_t pairs = values.size() / 2;
    for (std::size_t i = 0; i < pairs; ++i) values[i] = combine(values[2 * i], values[2 * i + 1]);
    values.resize(pairs);
  };
  halve(load_.interval_end_s, [](double, double later) { return later; });
  for (LinkSeries& s : load_.links) halve(s.bytes, [](double a, double b) { return a + b; });
  interval_ *= 2;
}

LinkLoad LinkMeter::finish() {
  const double now = sg4::Engine::get_clock() - origin_;
  if (load_.interval_end_s.empty() || now > load_.interval_end_s.back()) sample(now);
  LinkLoad out;
  out.interval_end_s = load_.interval_end_s;
  for (const LinkSeries& s : load_.links)
    if (s.total_bytes() > 0) out.links.push_back(s);
  return out;
}

}  // namespace memtwin::sim
