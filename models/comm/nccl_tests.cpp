#include "models/comm/nccl_tests.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "models/comm/collective_model.h"
#include "models/scenario/scenario_error.h"

namespace memtwin {
namespace {

std::vector<std::string> tokens(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

std::optional<Collective> collective_of_test(const std::string& name) {
  // nccl-tests' binaries, and the names they print.
  const std::pair<const char*, Collective> known[] = {{"all_reduce", Collective::all_reduce},
                                                      {"all_gather", Collective::all_gather},
                                                      {"reduce_scatter", Collective::reduce_scatter},
                                                      {"alltoall", Collective::all_to_all}};
  for (const auto& [prefix, kind] : known) {
    if (name.find(std::string(prefix) + "_perf") != std::string::npos) return kind;
  }
  return std::nullopt;
}

bool parse_number(const std::string& text, double& value) {
  try {
    std::size_t used = 0;
    value = std::stod(text, &used);
    return used == text.size() && std::isfinite(value);
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

NcclTestsRun parse_nccl_tests(const std::string& path, const std::string& text) {
  NcclTestsRun run;
  run.path = path;
  std::optional<Collective> kind;
  std::set<std::string> hosts;
  int time_column = -1, columns = 0;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto t = tokens(line);
    if (t.empty()) continue;
    if (t[0] == "#") {
      const std::string body = line.substr(line.find('#') + 1);
      const auto starting = body.find("Collective test starting:");
      if (starting != std::string::npos) {
        kind = collective_of_test(body.substr(starting));
        if (!kind) {
          throw ScenarioError({path, number, 1}, "", "not a collective memtwin models: '" + body.substr(starting + 25) +
                                                        "' (all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf)");
        }
      }
      // "#  Rank  0 Group  0 Pid 1234 on node01 device  0 [...] NVIDIA H100 80GB HBM3"
      if (t.size() > 1 && t[1] == "Rank") {
        const auto on = std::find(t.begin(), t.end(), "on");
        if (on == t.end() || on + 1 == t.end()) throw ScenarioError({path, number, 1}, "", "a Rank line without its host ('on HOST')");
        hosts.insert(*(on + 1));
        ++run.ranks;
      }
      // The column header: "#  size  count  type  redop  root  time  algbw  busbw  #wrong ..."
      if (t.size() > 2 && t[1] == "size" && std::find(t.begin(), t.end(), "busbw") != t.end()) {
        for (std::size_t i = 1; i < t.size(); ++i) {
          if (time_column < 0 && (t[i] == "time" || t[i] == "cputime")) time_column = static_cast<int>(i) - 1;
        }
        columns = static_cast<int>(t.size()) - 1;
      }
      continue;
    }
    if (time_column < 0) continue;  // text before the table
    double bytes = 0, us = 0;
    if (!parse_number(t[0], bytes)) continue;  // warnings and other lines NCCL prints in between
    if (static_cast<int>(t.size()) < columns - 1 || !parse_number(t[time_column], us)) {
      throw ScenarioError({path, number, 1}, "", "a result row without a number in the out-of-place time column (column " +
                                                     std::to_string(time_column + 1) + ")");
    }
    if (!(bytes > 0) || !(us > 0)) continue;  // nccl-tests prints zero-size rows for some collectives
    run.rows.push_back({bytes, us * 1e-6, number});
  }
  if (!kind) kind = collective_of_test(path.substr(path.find_last_of('/') + 1));
  if (!kind) {
    throw ScenarioError({path, 1, 1}, "",
                        "cannot tell which collective this is: no '# Collective test starting:' line and the file name "
                        "does not name one (all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf)");
  }
  run.collective = *kind;
  if (time_column < 0) throw ScenarioError({path, number, 1}, "", "no nccl-tests result table (the '#  size  count ...' header)");
  if (run.ranks < 2) {
    throw ScenarioError({path, 1, 1}, "", "found " + std::to_string(run.ranks) +
                                              " '#  Rank' lines: a collective needs at least 2 ranks, and the file must keep "
                                              "nccl-tests' device list");
  }
  run.nodes = static_cast<int>(hosts.size());
  if (run.ranks % run.nodes != 0) {
    throw ScenarioError({path, 1, 1}, "", std::to_string(run.ranks) + " ranks on " + std::to_string(run.nodes) +
                                              " hosts: memtwin models groups with the same number of ranks on every node");
  }
  return run;
}

NcclTestsFit fit_nccl_tests(const NcclTestsRun& run) {
  // Weighted least squares of t = L + x g, x = bytes x bus factor, weights 1 / t^2.
  const double factor = bus_factor(run.collective, run.ranks);
  double sw = 0, sx = 0, sxx = 0, st = 0, sxt = 0;
  std::set<double> sizes;
  for (const auto& r : run.rows) {
    const double w = 1 / (r.seconds * r.seconds), x = r.bytes * factor;
    sw += w, sx += w * x, sxx += w * x * x, st += w * r.seconds, sxt += w * x * r.seconds;
    sizes.insert(r.bytes);
  }
  if (sizes.size() < 2) {
    throw ScenarioError({run.path, 1, 1}, "", "needs results at two sizes at least to fit latency and bandwidth (found " +
                                                  std::to_string(sizes.size()) + ")");
  }
  const double det = sw * sxx - sx * sx;
  double g = (sw * sxt - sx * st) / det;
  double latency = (st - g * sx) / sw;
  if (latency < 0) {  // no latency visible at these sizes: bandwidth alone
    latency = 0;
    g = sxt / sxx;
  }
  if (!(g > 0) || !std::isfinite(g)) {
    throw ScenarioError({run.path, 1, 1}, "",
                        "the times do not grow with size: the bandwidth cannot be fitted (measure up to sizes where "
                        "busbw levels off, e.g. nccl-tests -e 1G)");
  }
  NcclTestsFit fit;
  fit.points = static_cast<int>(run.rows.size());
  double sq = 0;
  for (const auto& r : run.rows) {
    const double rel = (latency + r.bytes * factor * g - r.seconds) / r.seconds;
    sq += rel * rel;
  }
  fit.rms_relative_error = std::sqrt(sq / fit.points);
  fit.measured.collective = collective_name(run.collective);
  fit.measured.ranks = run.ranks;
  fit.measured.nodes = run.nodes;
  fit.measured.latency = Seconds(latency);
  fit.measured.bus_bandwidth = BytesPerSec(1 / g);
  fit.measured.source = run.path.substr(run.path.find_last_of('/') + 1);
  return fit;
}

}  // namespace memtwin
