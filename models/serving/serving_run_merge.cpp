#include "models/serving/serving_run_merge.h"

#include <algorithm>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace memtwin {
namespace {

using nlohmann::json;

// The counters that add over replicas and the peaks that take the larger.
template <typename Run, typename F>
void for_each_sum(Run& r, F&& f) {
  f("preemptions", r.preemptions);
  f("swaps", r.swaps);
  f("rejected", r.rejected);
  f("iterations", r.iterations);
  f("swap_space_full", r.swap_space_full);
  f("prefix_cache_evictions", r.prefix_cache_evictions);
  f("prefixes_dropped", r.prefixes_dropped);
  f("swap_bytes", r.swap_bytes);
  f("prefix_offload_bytes", r.prefix_offload_bytes);
  f("prefix_fetch_host_bytes", r.prefix_fetch_host_bytes);
  f("prefix_fetch_nvme_bytes", r.prefix_fetch_nvme_bytes);
  f("prefix_nvme_write_bytes", r.prefix_nvme_write_bytes);
}
template <typename Run, typename F>
void for_each_peak(Run& r, F&& f) {
  f("peak_blocks_used", r.peak_blocks_used);
  f("peak_swap_bytes", r.peak_swap_bytes);
  f("host_tier_peak_bytes", r.host_tier_peak_bytes);
  f("nvme_tier_peak_bytes", r.nvme_tier_peak_bytes);
  f("makespan_s", r.makespan_s);
}

}  // namespace

std::string replica_share(const ServingRun& run, int replica) {
  json j;
  j["replica"] = replica;
  j["requests_in_run"] = run.requests.size();
  json records = json::array();
  for (std::size_t i = 0; i < run.requests.size(); ++i) {
    const RequestRecord& q = run.requests[i];
    if (q.replica != replica) continue;
    records.push_back({i, q.arrival_s, q.first_token_s, q.finish_s, q.preemptions, q.swaps, q.cached_tokens});
  }
  j["records"] = records;
  json gaps = json::array();
  for (const auto& [value, count] : run.inter_token_s.runs()) gaps.push_back({value, count});
  j["inter_token_s"] = gaps;
  json iterations = json::array();
  for (const ServingRun::Iteration& it : run.iteration_log) {
    if (it.replica == replica) iterations.push_back({it.start_s, it.end_s, it.decode, it.prefill_tokens});
  }
  j["iteration_log"] = iterations;
  for_each_sum(run, [&](const char* key, const auto& v) { j[key] = v; });
  for_each_peak(run, [&](const char* key, const auto& v) { j[key] = v; });
  j["op_seconds"] = run.op_seconds.seconds;
  j["executed_ops"] = run.executed_ops;
  return j.dump();
}

void merge_replica_share(ServingRun& run, const std::string& share) {
  const json j = json::parse(share);
  if (j.at("requests_in_run").get<std::size_t>() != run.requests.size()) {
    throw std::invalid_argument("a replica's share of a serving run with another number of requests");
  }
  const int replica = j.at("replica").get<int>();
  for (const json& rec : j.at("records")) {
    const auto i = rec.at(0).get<std::size_t>();
    if (i >= run.requests.size()) throw std::invalid_argument("a replica's share names a request beyond the run");
    RequestRecord& q = run.requests[i];
    q.replica = replica;
    q.arrival_s = rec.at(1).get<double>();
    q.first_token_s = rec.at(2).get<double>();
    q.finish_s = rec.at(3).get<double>();
    q.preemptions = rec.at(4).get<int>();
    q.swaps = rec.at(5).get<int>();
    q.cached_tokens = rec.at(6).get<int>();
  }
  for (const json& g : j.at("inter_token_s")) {
    const auto value = g.at(0).get<float>();
    for (auto n = g.at(1).get<std::uint32_t>(); n > 0; --n) run.inter_token_s.add(value);
  }
  for (const json& it : j.at("iteration_log")) {
    if (run.iteration_log.size() >= ServingRun::kMaxLoggedIterations) break;
    run.iteration_log.push_back({replica, it.at(0).get<double>(), it.at(1).get<double>(), it.at(2).get<int>(), it.at(3).get<int>()});
  }
  for_each_sum(run, [&](const char* key, auto& v) { v += j.at(key).get<std::decay_t<decltype(v)>>(); });
  for_each_peak(run, [&](const char* key, auto& v) { v = std::max(v, j.at(key).get<std::decay_t<decltype(v)>>()); });
  const auto seconds = j.at("op_seconds").get<std::vector<double>>();
  if (seconds.size() != kIterationOps) throw std::invalid_argument("a replica's share with other kinds of work");
  for (std::size_t i = 0; i < kIterationOps; ++i) run.op_seconds.seconds[i] += seconds[i];
  for (const auto& op : j.at("executed_ops")) run.executed_ops.insert(op.get<std::string>());
}

}  // namespace memtwin
