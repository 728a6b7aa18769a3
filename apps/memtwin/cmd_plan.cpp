// memtwin plan: the best feasible configuration in a search space. Candidates the analytic memory
// model rejects are pruned in-process; the rest run on the chosen backend as their own processes;
// requirements filter them and the objective ranks them.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/memtwin/commands.h"
#include "apps/memtwin/json_path.h"
#include "apps/memtwin/options.h"
#include "apps/memtwin/point_runner.h"
#include "apps/memtwin/rate_search.h"
#include "apps/memtwin/requirements.h"
#include "apps/memtwin/seed_spread.h"
#include "models/memory/serving_memory.h"
#include "models/memory/training_memory.h"
#include "models/serving/disaggregation.h"
#include "models/scenario_loader.h"
#include "models/unit_parse.h"

namespace po = boost::program_options;

namespace memtwin::cli {
namespace {

struct Candidate {
  std::size_t index = 0;
  std::vector<std::string> overrides;
  std::optional<double> objective;  // known before running for gpus/cost
  int gpus = 0;
  double price = 0;
  std::string failure;              // empty: feasible
  nlohmann::json result;
  std::optional<RateSearch> rates;  // --maximize: this candidate's own rate search
};

// max_rate.seeds: the sustained rate found at each seed and, when every seed found one, their
// mean and interval (seed_spread's statistics).
nlohmann::ordered_json seed_rates(const std::vector<std::uint64_t>& seeds, const std::vector<std::optional<double>>& sustained) {
  nlohmann::ordered_json out;
  out["values"] = seeds;
  out["sustained_per_s_by_seed"] = nlohmann::ordered_json::array();
  std::vector<double> found;
  for (const auto& v : sustained) {
    out["sustained_per_s_by_seed"].push_back(v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json());
    if (v) found.push_back(*v);
  }
  out["confidence"] = kSeedConfidence;
  if (found.size() == sustained.size()) out["sustained_per_s"] = spread_of(found);
  return out;
}

}  // namespace

int cmd_plan(const Args& args) {
  po::options_description options("options");
  po::positional_options_description positional;
  options.add_options()
      ("scenario", po::value<std::string>(), "scenario YAML file")
      ("minimize", po::value<std::string>()->default_value("cost"),
       "gpus | cost (USD per hour) | cost_to_target (USD to train training.target_tokens) | step_time | ttft_p99 | tpot_p99 | a numeric result path")
      ("maximize", po::value<std::string>(),
       "goodput_per_gpu | goodput_per_usd: with --max-rate, search every candidate's highest rate under the requirements "
       "(DistServe's goodput with --attainment) and rank by it per GPU or per dollar")
      ("require", po::value<std::vector<std::string>>()->composing(), "PATH [<=|>=|<|>|==|!=] NUMBER, or a boolean PATH (repeatable)")
      ("search", po::value<std::vector<std::string>>()->composing(), "KEY=V1,V2,... (repeatable; every combination is a candidate); a value LO..HI doubles from LO to HI, LO..HI:STEP counts by STEP")
      ("set", po::value<std::vector<std::string>>()->composing(), "override applied to every candidate")
      ("price", po::value<std::vector<std::string>>()->composing(),
       "GPU=USD per GPU-hour, replacing the catalog's (and the scenario's) price for that GPU type (repeatable)")
      ("max-rate", po::value<std::string>(),
       "LO..HI (e.g. 1/s..64/s): for serving, also find the highest request rate the best configuration sustains under the requirements "
       "(without --require, under the scenario's inference.slo)")
      ("attainment", po::value<double>(),
       "F in (0, 1]: with --max-rate, judge a rate by the fraction of requests meeting every inference.slo limit instead of "
       "the SLO's p99s: the answer is DistServe's goodput (the highest rate at which F of the requests meet the SLO)")
      ("seeds", po::value<int>()->default_value(1),
       "N: with --max-rate, search the best configuration's rate at N consecutive seeds (the scenario's first) and report "
       "their mean and 95% interval (max_rate.seeds)")
      ("backend", po::value<std::string>()->default_value("auto"), "backend for the candidates that fit")
      ("jobs,j", po::value<int>()->default_value(1), "candidates run at once")
      ("top", po::value<int>()->default_value(3), "runners-up to show")
      ("json", po::bool_switch(), "print JSON");
  positional.add("scenario", 1);
  auto vm = parse_args(args, options, positional,
                       "usage: memtwin plan SCENARIO --minimize gpus|cost|cost_to_target|step_time|PATH --require EXPR ... --search KEY=V1,V2 ...\n\n"
                       "Searches the combinations of the --search values for the best feasible configuration:\n"
                       "the analytic memory model prunes what cannot fit, the backend runs the rest, the\n"
                       "requirements filter and the objective ranks. With --max-rate (serving), the best configuration's\n"
                       "highest sustainable request rate under the requirements is searched too; without --search the\n"
                       "scenario as written is the one configuration. Exit code 3 when nothing is feasible.");
  if (!vm) return kOk;
  if (!vm->count("scenario")) throw UsageError("a scenario file is required");
  if (!vm->count("search") && !vm->count("max-rate")) throw UsageError("give at least one --search KEY=V1,V2,... (or --max-rate)");
  const std::string scenario = (*vm)["scenario"].as<std::string>();
  std::vector<std::string> common;
  if (vm->count("set")) common = (*vm)["set"].as<std::vector<std::string>>();
  const Scenario as_written = load_scenario_file(scenario, common).scenario;
  refuse_jobs(as_written, "plan");
  std::vector<Requirement> requirements;
  if (vm->count("require")) {
    for (const auto& r : (*vm)["require"].as<std::vector<std::string>>()) requirements.push_back(parse_requirement(r));
  }
  // Named objectives for the common result paths; any other numeric path is taken as written.
  const std::map<std::string, std::string> objective_paths = {
      {"step_time", "time.step_s"}, {"ttft_p99", "latency_s.ttft.p99"}, {"tpot_p99", "latency_s.tpot.p99"}};
  std::string minimize = (*vm)["minimize"].as<std::string>();
  if (auto named = objective_paths.find(minimize); named != objective_paths.end()) minimize = named->second;
  // --maximize ranks by each candidate's own rate search: per GPU, or per dollar (requests per USD).
  const std::string maximize = vm->count("maximize") ? (*vm)["maximize"].as<std::string>() : "";
  if (!maximize.empty()) {
    if (maximize != "goodput_per_gpu" && maximize != "goodput_per_usd") {
      throw UsageError("--maximize expects goodput_per_gpu or goodput_per_usd; got '" + maximize + "'");
    }
    if (!(*vm)["minimize"].defaulted()) throw UsageError("give --minimize or --maximize, not both");
    if (!vm->count("max-rate")) throw UsageError("--maximize " + maximize + " searches each candidate's rate: give --max-rate LO..HI");
    minimize = maximize;
  }
  const Grid grid = expand_grid(vm->count("search") ? (*vm)["search"].as<std::vector<std::string>>() : std::vector<std::string>{}, {});
  std::optional<std::pair<double, double>> rate_range;
  if (vm->count("max-rate")) {
    rate_range = parse_rate_range((*vm)["max-rate"].as<std::string>());
    check_rate_searchable(as_written);
  }
  // Without a --require of the user's, rates are judged by the scenario's SLO (and the output says so).
  std::vector<Requirement> rate_requirements = requirements;
  std::string judged_by = "--require";
  if (rate_range && requirements.empty()) {
    rate_requirements = slo_requirements(as_written);
    judged_by = rate_requirements.empty() ? "sustainability alone (no --require, no inference.slo)" : "inference.slo";
  }
  const std::vector<std::uint64_t> seeds = seeds_to_run(as_written.seed, (*vm)["seeds"].as<int>());
  if (seeds.size() > 1 && !rate_range) throw UsageError("--seeds repeats the --max-rate search per seed; give --max-rate LO..HI too");
  if (vm->count("attainment")) {
    const double fraction = (*vm)["attainment"].as<double>();
    if (!rate_range) throw UsageError("--attainment judges the rates --max-rate searches; give --max-rate LO..HI too");
    if (!(fraction > 0 && fraction <= 1)) throw UsageError("--attainment expects a fraction in (0, 1], e.g. 0.9; got " + std::to_string(fraction));
    if (slo_requirements(as_written).empty()) {
      throw UsageError("--attainment counts the requests that meet inference.slo, and this scenario has none: set "
                       "inference.slo.ttft_p99, tpot_p99 or e2e_p99");
    }
    std::ostringstream text;
    text << "goodput.fraction_meeting_slo >= " << fraction;
    rate_requirements = requirements;
    rate_requirements.push_back(parse_requirement(text.str()));
    judged_by = "goodput";
  }
  // Prices per GPU type given on the command line, and whether any candidate used each.
  std::map<std::string, std::pair<double, bool>> prices;
  if (vm->count("price")) {
    for (const auto& spec : (*vm)["price"].as<std::vector<std::string>>()) {
      const auto eq = spec.find('=');
      double usd = -1;
      try {
        if (eq != std::string::npos) usd = std::stod(spec.substr(eq + 1));
      } catch (const std::exception&) {
      }
      if (eq == std::string::npos || eq == 0 || usd < 0) throw UsageError("--price expects GPU=USD per GPU-hour, e.g. h100-sxm=2.49; got '" + spec + "'");
      prices[spec.substr(0, eq)] = {usd, false};
    }
  }

  // The runs' captured output lives here until the plan is made.
  const ScratchDirectory scratch("memtwin-plan");
  std::vector<Candidate> candidates(grid.points.size());
  std::vector<std::size_t> to_run;
  for (std::size_t i = 0; i < grid.points.size(); ++i) {
    Candidate& c = candidates[i];
    c.index = i;
    c.overrides = grid.points[i];
    auto overrides = common;
    overrides.insert(overrides.end(), c.overrides.begin(), c.overrides.end());
    try {
      const Scenario s = load_scenario_file(scenario, overrides).scenario;
      // GPUs paid for: the whole cluster for training; the deployment's GPUs for serving, each
      // disaggregated side at its own type's price. c.price is their mean price per GPU-hour.
      const std::vector<GpusOfType> paid = s.training ? std::vector<GpusOfType>{{s.cluster.gpu.name, s.cluster.total_gpus(),
                                                                                  s.cluster.price_per_gpu_hour}}
                                                      : deployment_gpus(s);
      double cost_per_hour = 0;
      std::string unpriced;
      c.gpus = 0;
      for (const GpusOfType& type : paid) {
        std::optional<double> price = type.price_per_hour;
        if (auto p = prices.find(type.gpu); p != prices.end()) {
          price = p->second.first;
          p->second.second = true;
        }
        if (!price && unpriced.empty()) unpriced = type.gpu;
        c.gpus += type.count;
        cost_per_hour += type.count * price.value_or(0);
      }
      c.price = c.gpus > 0 ? cost_per_hour / c.gpus : 0;
      if (minimize == "gpus") c.objective = c.gpus;
      if (minimize == "cost") c.objective = cost_per_hour;
      // Without a price a cost objective would rank the candidate as free.
      if (!unpriced.empty() && (minimize == "cost" || minimize == "cost_to_target" || minimize == "goodput_per_usd"))
        c.failure = "no price for GPU " + unpriced + "; give --price " + unpriced + "=USD";
      // Prune with the closed-form memory model before paying for a simulation.
      if (s.training) {
        const TrainingMemory m = training_memory(s);
        if (!m.fits()) c.failure = "does not fit in memory (peak " + human_bytes(m.peak) + " of " + human_bytes(m.capacity) + ")";
      } else {
        const ServingMemory m = serving_memory(s);
        if (!m.fits) c.failure = "does not fit in memory: " + m.why_not;
      }
    } catch (const ScenarioError& e) {
      c.failure = "invalid: " + e.message();
    }
    if (c.failure.empty()) to_run.push_back(i);
  }
  for (const auto& [gpu, price] : prices) {
    if (!price.second) throw UsageError("--price " + gpu + ": no candidate uses GPU " + gpu + " (names as in `memtwin gpus`)");
  }
  if (!maximize.empty()) {
    // Each candidate's highest rate under the requirements, in candidate order.
    for (std::size_t i : to_run) {
      Candidate& c = candidates[i];
      auto overrides = common;
      overrides.insert(overrides.end(), c.overrides.begin(), c.overrides.end());
      c.rates = search_max_rate(scenario, (*vm)["backend"].as<std::string>(), overrides, rate_requirements, rate_range->first,
                                rate_range->second, (*vm)["jobs"].as<int>(), scratch.path / ("rates-of-" + std::to_string(i)));
      if (!c.rates->sustained_per_s) {
        c.failure = "sustains no rate in the range: " + c.rates->failure;
      } else if (maximize == "goodput_per_usd" && !(c.price > 0)) {
        c.failure = "no price above 0 to divide by; give --price GPU=USD";
      } else {
        const double rate = *c.rates->sustained_per_s;
        c.objective = maximize == "goodput_per_gpu" ? rate / c.gpus : rate * 3600 / (c.gpus * c.price);
      }
    }
  } else {
  run_points(scenario, (*vm)["backend"].as<std::string>(), common, grid.points, to_run, (*vm)["jobs"].as<int>(),
             scratch.path / "candidates",
             [&](const PointOutcome& o) {
               Candidate& c = candidates[o.index];
               if (o.exit_code != 0 && o.exit_code != 3) {
                 c.failure = "the run failed: " + o.err.substr(0, o.err.find('\n'));
                 return;
               }
               c.result = nlohmann::json::parse(o.out);
               for (const auto& r : requirements) {
                 const std::string why = unmet(r, c.result);
                 if (!why.empty()) {
                   c.failure = why;
                   break;
                 }
               }
               if (minimize == "cost_to_target") {
                 const auto days = number_at(c.result, "time.days_to_target");
                 if (days) c.objective = c.gpus * c.price * *days * 24;
               } else if (minimize != "gpus" && minimize != "cost") {
                 c.objective = number_at(c.result, minimize);
               }
               if (c.failure.empty() && !c.objective) c.failure = "the objective " + minimize + " is not in the result";
             });
  }

  std::vector<const Candidate*> feasible;
  for (const auto& c : candidates)
    if (c.failure.empty()) feasible.push_back(&c);
  // Best first: the least of a --minimize objective, the most of a --maximize one.
  const bool larger_is_better = !maximize.empty();
  auto better = [&](const Candidate* a, const Candidate* b) {
    return larger_is_better ? *a->objective > *b->objective : *a->objective < *b->objective;
  };
  std::stable_sort(feasible.begin(), feasible.end(), better);
  // The options that would have been cheaper than the winner, and why they were not taken.
  std::vector<const Candidate*> cheaper;
  for (const auto& c : candidates) {
    if (!c.failure.empty() && c.objective && (feasible.empty() || better(&c, feasible.front()))) cheaper.push_back(&c);
  }
  std::stable_sort(cheaper.begin(), cheaper.end(), [&](const Candidate* a, const Candidate* b) { return better(b, a); });

  // The best configuration's highest sustainable request rate.
  std::optional<RateSearch> rates;
  nlohmann::ordered_json rate_seeds;  // --seeds: max_rate.seeds
  if (rate_range && !feasible.empty()) {
    auto overrides = common;
    overrides.insert(overrides.end(), feasible.front()->overrides.begin(), feasible.front()->overrides.end());
    rates = feasible.front()->rates ? *feasible.front()->rates  // --maximize searched it already
                                    : search_max_rate(scenario, (*vm)["backend"].as<std::string>(), overrides, rate_requirements,
                                                      rate_range->first, rate_range->second, (*vm)["jobs"].as<int>(),
                                                      scratch.path / "rates");
    // The same search at the other seeds: how far the answer moves with the draw of the workload.
    std::vector<std::optional<double>> sustained = {rates->sustained_per_s};
    for (std::size_t i = 1; i < seeds.size(); ++i) {
      auto at_seed = overrides;
      at_seed.push_back("seed=" + std::to_string(seeds[i]));
      sustained.push_back(search_max_rate(scenario, (*vm)["backend"].as<std::string>(), at_seed, rate_requirements, rate_range->first,
                                          rate_range->second, (*vm)["jobs"].as<int>(), scratch.path / ("rates" + std::to_string(i)))
                              .sustained_per_s);
    }
    if (seeds.size() > 1) rate_seeds = seed_rates(seeds, sustained);
  }
  // The result fields each rate probe reports: its JSON name, where it is in the result, its text column.
  struct ProbeColumn {
    const char *json, *path, *header;
    int width;
  };
  static constexpr ProbeColumn kProbeColumns[] = {{"throughput_requests_per_s", "throughput.requests_per_s", "throughput/s", 14},
                                                  {"served_requests_per_s", "load.served_requests_per_s_while_arriving",
                                                   "served/s", 10},
                                                  {"ttft_p99_s", "latency_s.ttft.p99", "ttft_p99_s", 12},
                                                  {"tpot_p99_s", "latency_s.tpot.p99", "tpot_p99_s", 12}};
  auto optional_json = [](const std::optional<double>& v) { return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(); };

  auto describe = [](const Candidate& c) {
    std::string s;
    for (const auto& o : c.overrides) s += (s.empty() ? "" : ", ") + o;
    return s.empty() ? std::string("the scenario as written") : s;
  };
  const int top = (*vm)["top"].as<int>();
  if ((*vm)["json"].as<bool>()) {
    nlohmann::ordered_json doc;
    doc["schema"] = "memtwin.plan/1";
    doc[maximize.empty() ? "minimize" : "maximize"] = minimize;
    doc["candidates"] = candidates.size();
    doc["simulated"] = to_run.size();
    auto entry = [&](const Candidate& c) {
      nlohmann::ordered_json e;
      e["overrides"] = c.overrides;
      if (c.objective) e["objective"] = *c.objective;
      e["gpus"] = c.gpus;
      if (c.price > 0) e["cost_per_hour"] = c.gpus * c.price;  // USD, every GPU type at its price
      if (c.rates) e["sustained_per_s"] = optional_json(c.rates->sustained_per_s);
      if (!c.failure.empty()) e["failure"] = c.failure;
      return e;
    };
    doc["winner"] = feasible.empty() ? nlohmann::ordered_json() : entry(*feasible.front());
    doc["runners_up"] = nlohmann::ordered_json::array();
    for (std::size_t i = 1; i < feasible.size() && static_cast<int>(i) <= top; ++i) doc["runners_up"].push_back(entry(*feasible[i]));
    doc["cheaper_but_infeasible"] = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < cheaper.size() && static_cast<int>(i) < top; ++i) doc["cheaper_but_infeasible"].push_back(entry(*cheaper[i]));
    if (rates) {
      nlohmann::ordered_json r;
      r["sustained_per_s"] = optional_json(rates->sustained_per_s);
      r["first_failing_per_s"] = optional_json(rates->first_failing_per_s);
      r["judged_by"] = judged_by;
      // Per GPU and per dollar, so that configurations of different sizes and prices compare.
      const Candidate& best = *feasible.front();
      r["sustained_per_gpu"] = rates->sustained_per_s && best.gpus > 0 ? nlohmann::ordered_json(*rates->sustained_per_s / best.gpus)
                                                                          : nlohmann::ordered_json();
      r["requests_per_usd"] = rates->sustained_per_s && best.price > 0
                                  ? nlohmann::ordered_json(*rates->sustained_per_s * 3600 / (best.gpus * best.price))
                                  : nlohmann::ordered_json();
      r["requirements"] = nlohmann::ordered_json::array();
      for (const auto& q : rate_requirements) r["requirements"].push_back(q.text);
      r["requirements"].push_back("load.sustainable");
      if (!rates->failure.empty()) r["failure"] = rates->failure;
      if (!rate_seeds.is_null()) r["seeds"] = rate_seeds;
      r["probes"] = nlohmann::ordered_json::array();
      for (const auto& p : rates->probes) {
        nlohmann::ordered_json e;
        e["rate_per_s"] = p.rate_per_s;
        e["ok"] = p.failure.empty();
        if (!p.failure.empty()) e["failure"] = p.failure;
        for (const auto& c : kProbeColumns) e[c.json] = optional_json(number_at(p.result, c.path));
        r["probes"].push_back(e);
      }
      doc["max_rate"] = r;
    }
    std::cout << doc.dump(2) << "\n";
  } else {
    std::cout << candidates.size() << " candidates, " << to_run.size() << " run on the backend after the memory model pruned "
              << candidates.size() - to_run.size() << "; " << (maximize.empty() ? "minimizing " : "maximizing ") << minimize
              << (maximize.empty() ? "" : " (each candidate's own rate search)") << "\n";
    if (feasible.empty()) {
      std::cout << "no candidate meets the requirements\n";
    } else {
      std::cout << "best: " << describe(*feasible.front()) << "  (" << minimize << " = " << *feasible.front()->objective << ", "
                << feasible.front()->gpus << " GPUs)\n";
      for (std::size_t i = 1; i < feasible.size() && static_cast<int>(i) <= top; ++i) {
        std::cout << "  runner-up: " << describe(*feasible[i]) << "  (" << *feasible[i]->objective << ")\n";
      }
    }
    for (std::size_t i = 0; i < cheaper.size() && static_cast<int>(i) < top; ++i) {
      std::cout << "  cheaper but not taken: " << describe(*cheaper[i]) << "  (" << *cheaper[i]->objective << "): "
                << cheaper[i]->failure << "\n";
    }
    if (rates) {
      if (judged_by == "inference.slo") {
        std::cout << "rates judged by the scenario's inference.slo:";
        for (const auto& q : rate_requirements) std::cout << " " << q.text << ";";
        std::cout << " give --require to judge by other limits\n";
      } else if (judged_by == "goodput") {
        std::cout << "rates judged as goodput: " << rate_requirements.back().text << " (the scenario's inference.slo:";
        for (const auto& q : slo_requirements(as_written)) std::cout << " " << q.text << ";";
        std::cout << " every limit per request)\n";
      } else if (judged_by != "--require") {
        std::cout << "rates judged by " << judged_by << "\n";
      }
      std::cout << "highest request rate the best sustains: ";
      if (rates->sustained_per_s) {
        const Candidate& best = *feasible.front();
        std::cout << *rates->sustained_per_s << "/s";
        if (best.gpus > 0) std::cout << " = " << *rates->sustained_per_s / best.gpus << "/s per GPU";
        if (best.price > 0) std::cout << ", " << *rates->sustained_per_s * 3600 / (best.gpus * best.price) << " requests per USD";
      }
      else std::cout << "none in the range";
      if (rates->first_failing_per_s) std::cout << "  (" << *rates->first_failing_per_s << "/s fails: " << rates->failure << ")";
      else std::cout << "  (the top of the range still passes)";
      if (rate_seeds.contains("sustained_per_s")) {
        const auto& m = rate_seeds["sustained_per_s"];
        std::cout << "\n  over seeds " << seeds.front() << ".." << seeds.back() << ": mean " << m["mean"].get<double>() << "/s, 95% interval ["
                  << m["ci_low"].get<double>() << " .. " << m["ci_high"].get<double>() << "]/s, range " << m["min"].get<double>() << " .. "
                  << m["max"].get<double>() << "/s";
      } else if (!rate_seeds.is_null()) {
        std::cout << "\n  over seeds " << seeds.front() << ".." << seeds.back() << ": some seed sustains no rate in the range, no interval";
      }
      std::cout << "\n  " << std::left << std::setw(12) << "rate/s";
      for (const auto& c : kProbeColumns) std::cout << std::setw(c.width) << c.header;
      std::cout << "verdict\n";
      for (const auto& p : rates->probes) {
        std::cout << "  " << std::setw(12) << std::setprecision(5) << p.rate_per_s;
        for (const auto& c : kProbeColumns) {
          const auto v = number_at(p.result, c.path);
          std::ostringstream cell;
          if (v) cell << std::setprecision(4) << *v;
          else cell << "-";
          std::cout << std::setw(c.width) << cell.str();
        }
        std::cout << (p.failure.empty() ? "ok" : p.failure) << "\n";
      }
      std::cout << std::right;
    }
  }
  return feasible.empty() ? kDoesNotFit : kOk;
}

}  // namespace memtwin::cli
