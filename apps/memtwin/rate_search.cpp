#include "apps/memtwin/rate_search.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <sstream>

#include "apps/memtwin/commands.h"
#include "apps/memtwin/point_runner.h"
#include "models/scenario_loader.h"
#include "models/unit_parse.h"

namespace memtwin::cli {
namespace {

double parse_rate(const std::string& text) {
  try {
    if (text.find('/') == std::string::npos) return parse_rate_per_second(text + "/s");
    return parse_rate_per_second(text);
  } catch (const std::exception& e) {
    throw UsageError("--max-rate: '" + text + "' is not a rate (" + e.what() + ")");
  }
}

std::string rate_override(double rate) {
  std::ostringstream s;
  s.precision(8);
  s << "inference.workload.rate=" << rate << "/s";
  return s.str();
}

}  // namespace

std::pair<double, double> parse_rate_range(const std::string& text) {
  const auto dots = text.find("..");
  if (dots == std::string::npos) throw UsageError("--max-rate expects LO..HI, e.g. 1/s..64/s; got '" + text + "'");
  const double lo = parse_rate(text.substr(0, dots)), hi = parse_rate(text.substr(dots + 2));
  if (!(lo > 0) || !(hi > lo)) throw UsageError("--max-rate '" + text + "': needs 0 < LO < HI");
  return {lo, hi};
}

void check_rate_searchable(const Scenario& s) {
  if (!s.inference) throw UsageError("--max-rate searches the request rate of a serving scenario; this one trains");
  if (s.inference->workload.arrival == Arrival::closed_loop)
    throw UsageError("--max-rate: a closed-loop workload has no arrival rate; use an open-loop arrival (poisson, gamma, constant)");
}

std::vector<Requirement> slo_requirements(const Scenario& s) {
  std::vector<Requirement> out;
  if (!s.inference) return out;
  const SloSpec& slo = s.inference->slo;
  for (const auto& [path, limit] : {std::pair{"latency_s.ttft.p99", slo.ttft_p99}, std::pair{"latency_s.tpot.p99", slo.tpot_p99},
                                    std::pair{"latency_s.e2e.p99", slo.e2e_p99}}) {
    if (!limit) continue;
    std::ostringstream text;
    text << path << " <= " << std::setprecision(6) << limit->value();
    out.push_back({text.str(), path, "<=", limit->value()});
  }
  return out;
}

RateSearch search_max_rate(const std::string& scenario, const std::string& backend, const std::vector<std::string>& overrides,
                           const std::vector<Requirement>& requirements, double lo, double hi, int jobs,
                           const std::filesystem::path& scratch, double tolerance) {
  check_rate_searchable(load_scenario_file(scenario, overrides).scenario);
  std::map<double, RateProbe> probes;
  // Runs the given rates (in parallel) and records them.
  auto evaluate = [&](const std::vector<double>& rates) {
    std::vector<std::vector<std::string>> points;
    std::vector<std::size_t> todo;
    for (std::size_t i = 0; i < rates.size(); ++i) {
      points.push_back({rate_override(rates[i])});
      todo.push_back(i);
    }
    run_points(scenario, backend, overrides, points, todo, jobs, scratch, [&](const PointOutcome& o) {
      RateProbe p{rates[o.index], "", {}};
      if (o.exit_code != 0 && o.exit_code != 3) {
        p.failure = "the run failed: " + o.err.substr(0, o.err.find('\n'));
      } else {
        p.result = nlohmann::json::parse(o.out);
        std::vector<Requirement> all = requirements;
        all.push_back(parse_requirement("load.sustainable"));
        for (const auto& r : all) {
          p.failure = unmet(r, p.result);
          if (!p.failure.empty()) break;
        }
      }
      probes[p.rate_per_s] = p;
    });
  };
  // The bracket: highest passing rate below the lowest failing one.
  auto bracket = [&](double& pass, double& fail) {
    fail = hi * 2;  // none yet
    for (const auto& [rate, p] : probes) {
      if (!p.failure.empty()) {
        fail = rate;
        break;
      }
    }
    pass = 0;
    for (const auto& [rate, p] : probes)
      if (rate < fail && p.failure.empty()) pass = rate;
  };
  evaluate({lo, hi});
  double pass = 0, fail = 0;
  bracket(pass, fail);
  while (pass > 0 && fail <= hi && fail / pass > 1 + tolerance) {
    const int k = std::max(1, jobs);
    std::vector<double> rates;
    for (int i = 1; i <= k; ++i) rates.push_back(pass * std::pow(fail / pass, static_cast<double>(i) / (k + 1)));
    evaluate(rates);
    bracket(pass, fail);
  }
  RateSearch out;
  if (pass > 0) out.sustained_per_s = pass;
  if (fail <= hi) {
    out.first_failing_per_s = fail;
    out.failure = probes[fail].failure;
  }
  for (auto& [rate, p] : probes) out.probes.push_back(std::move(p));
  return out;
}

}  // namespace memtwin::cli
