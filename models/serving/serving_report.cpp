#include "models/serving/serving_report.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>
#include <sstream>

#include "models/kv/kv_method.h"
#include "models/plan/trace_document.h"
#include "models/serving/disaggregation.h"

namespace memtwin {
namespace {

// Mean and nearest-rank percentiles. Each percentile is selected (nth_element, linear) rather than
// the whole vector sorted: a million-request run has tens of millions of inter-token gaps. The
// ranks are taken in increasing order, each selection within what lies above the previous one.
template <class T>
nlohmann::ordered_json summary(std::vector<T> values) {
  nlohmann::ordered_json out;
  if (values.empty()) return nullptr;
  double sum = 0;
  for (T v : values) sum += v;
  out["mean"] = sum / static_cast<double>(values.size());
  auto from = values.begin();
  for (const auto& [name, p] : {std::pair{"p50", 50.0}, {"p90", 90.0}, {"p99", 99.0}}) {
    const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(values.size())));
    const auto at = values.begin() + static_cast<std::ptrdiff_t>(std::min(values.size() - 1, rank == 0 ? 0 : rank - 1));
    std::nth_element(from, at, values.end());
    out[name] = static_cast<double>(*at);
    from = at;
  }
  return out;
}

// Runs in ascending (value, count) order, the order std::sort gives the pairs, by a radix sort on
// 64-bit keys: the value's bits made order-preserving (negative floats' inverted, the others' sign
// bit set) above the count. A million requests leave about four million runs, which std::sort
// took a third of a second to order (4% of the run). The keys are returned as they are (run_value
// and run_count read them): a run costs the sort two keys, and no third copy.
std::vector<std::uint64_t> sorted_runs(const std::vector<std::pair<float, std::uint32_t>>& runs) {
  const std::size_t n = runs.size();
  std::vector<std::uint64_t> keys(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &runs[i].first, sizeof bits);
    bits = (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
    keys[i] = (static_cast<std::uint64_t>(bits) << 32) | runs[i].second;
  }
  constexpr int kDigitBits = 16;
  std::vector<std::size_t> starts((std::size_t{1} << kDigitBits) + 1);
  std::vector<std::uint64_t> other;  // allocated at the first digit that is not one throughout
  for (int shift = 0; shift < 64; shift += kDigitBits) {  // least significant digit first; each pass stable
    std::fill(starts.begin(), starts.end(), 0);
    for (std::uint64_t k : keys) ++starts[((k >> shift) & 0xffffu) + 1];
    if (std::find(starts.begin() + 1, starts.end(), n) != starts.end()) continue;  // one digit throughout
    std::partial_sum(starts.begin(), starts.end(), starts.begin());
    other.resize(n);
    for (std::uint64_t k : keys) other[starts[(k >> shift) & 0xffffu]++] = k;
    keys.swap(other);
  }
  return keys;
}

float run_value(std::uint64_t key) {
  std::uint32_t bits = static_cast<std::uint32_t>(key >> 32);
  bits = (bits & 0x80000000u) != 0 ? bits & 0x7fffffffu : ~bits;
  float value;
  std::memcpy(&value, &bits, sizeof bits);
  return value;
}

std::uint32_t run_count(std::uint64_t key) { return static_cast<std::uint32_t>(key); }

// The same over samples held as runs of equal values: their percentiles walk the runs in value
// order, their mean sums each run's value x count.
nlohmann::ordered_json summary(const ValueRuns& samples) {
  if (samples.empty()) return nullptr;
  const std::vector<std::uint64_t> runs = sorted_runs(samples.runs());
  nlohmann::ordered_json out;
  double sum = 0;
  for (std::uint64_t run : runs) sum += static_cast<double>(run_value(run)) * run_count(run);
  const auto total = static_cast<double>(samples.size());
  out["mean"] = sum / total;
  std::size_t i = 0;
  std::uint64_t below = 0;  // samples in the runs before i
  for (const auto& [name, p] : {std::pair{"p50", 50.0}, {"p90", 90.0}, {"p99", 99.0}}) {
    const auto rank = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(p / 100.0 * total)));
    while (below + run_count(runs[i]) < rank) below += run_count(runs[i++]);
    out[name] = static_cast<double>(run_value(runs[i]));
  }
  return out;
}

}  // namespace

namespace {

// Scenario settings the serving engines (simulated and hardware) read but do not model yet: said in
// the result rather than dropped silently, so nobody takes the numbers for a run with them.
void note_unmodelled(std::vector<std::string>& notes, const Scenario& s) {
  const Inference& inf = *s.inference;
  const KvCompression m = inf.kv_cache.compression.method;
  if (inf.serving.prefix_caching && !shares_prefix_blocks(m))
    notes.push_back(std::string("inference.serving.prefix_caching: prefixes are shared only in uncompressed or group-quantised "
                                "caches; with ") + std::string(kKvCompressionNames.name(m)) + " every prompt was prefilled in full");
  if (inf.serving.prefix_caching && inf.workload.shared_prefix_groups == 0 && inf.workload.trace.empty())
    notes.push_back("inference.serving.prefix_caching: the workload has no shared prefixes (inference.workload.shared_prefix), "
                    "so nothing was found in the cache");
  if ((inf.tiers.host_memory || inf.tiers.nvme) && !inf.serving.prefix_caching)
    notes.push_back("inference.tiers: the tiers hold cached prefixes evicted from the GPU, and prefix caching is off, so "
                    "they held nothing; preemption by swap moves KV to host memory regardless (tiers.host_swap_bytes)");
}

}  // namespace

void add_serving_results(nlohmann::ordered_json& metrics, std::vector<std::string>& notes, const Scenario& s,
                         const ServingRun& run) {
  note_unmodelled(notes, s);
  std::vector<double> ttft, tpot, e2e;
  std::int64_t completed = 0, output_tokens = 0, good = 0;
  const SloSpec& slo = s.inference->slo;
  for (const auto& r : run.requests) {
    if (r.finish_s < 0) continue;
    ++completed;
    output_tokens += r.output_tokens;
    const double first = r.first_token_s - r.arrival_s;
    const double per_token = r.output_tokens > 1 ? (r.finish_s - r.first_token_s) / (r.output_tokens - 1) : 0.0;
    ttft.push_back(first);
    if (r.output_tokens > 1) tpot.push_back(per_token);
    e2e.push_back(r.finish_s - r.arrival_s);
    const bool meets = (!slo.ttft_p99 || first <= slo.ttft_p99->value()) && (!slo.tpot_p99 || per_token <= slo.tpot_p99->value()) &&
                       (!slo.e2e_p99 || r.finish_s - r.arrival_s <= slo.e2e_p99->value());
    good += meets;
  }
  const double duration = run.makespan_s > 0 ? run.makespan_s : 1;
  metrics["latency_s"] = {{"ttft", summary(ttft)}, {"tpot", summary(tpot)},
                          {"itl", summary(run.inter_token_s)},
                          {"e2e", summary(e2e)}};
  metrics["throughput"] = {{"requests_per_s", completed / duration}, {"output_tokens_per_s", output_tokens / duration}};
  // Of every request that ended: a rejected one (longer than the engine takes) meets no SLO.
  const std::int64_t ended = completed + run.rejected;
  metrics["goodput"] = {{"requests_per_s", good / duration}, {"fraction_meeting_slo", ended ? double(good) / ended : 0.0}};
  std::int64_t preempted = 0, swapped = 0;
  for (const auto& r : run.requests) {
    preempted += r.preemptions > 0;
    swapped += r.swaps > 0;
  }
  metrics["requests"] = {{"total", static_cast<std::int64_t>(run.requests.size())}, {"completed", completed},
                         {"preempted", preempted}, {"swapped", swapped}, {"rejected", run.rejected},
                         {"preemptions", run.preemptions}, {"iterations", run.iterations}};
  if (run.op_seconds.total() > 0) {
    // Compute by kind of work, summed over iterations (models/serving/iteration_ops.h).
    for (std::size_t k = 0; k < kIterationOps; ++k) metrics["op_time_s"][kIterationOpNames[k]] = run.op_seconds.seconds[k];
  }
  metrics["kv_cache"]["peak_utilization"] =
      run.capacity_blocks > 0 ? static_cast<double>(run.peak_blocks_used) / run.capacity_blocks : 0.0;
  metrics["tiers"] = {{"host_swap_bytes", run.swap_bytes}, {"swap_space_peak_bytes", run.peak_swap_bytes}};
  if (run.swap_space_full > 0) {
    notes.push_back(std::to_string(run.swap_space_full) + " swap preemptions found no room in host memory "
                    "(inference.tiers.host_memory when set, else inference.serving.swap_space per GPU) and recomputed "
                    "the sequence instead");
  }
  if (s.inference->tiers.host_memory || s.inference->tiers.nvme) {
    metrics["tiers"]["prefix_offload_bytes"] = run.prefix_offload_bytes;
    metrics["tiers"]["prefix_fetch_host_bytes"] = run.prefix_fetch_host_bytes;
    metrics["tiers"]["prefix_fetch_nvme_bytes"] = run.prefix_fetch_nvme_bytes;
    metrics["tiers"]["nvme_write_bytes"] = run.prefix_nvme_write_bytes;
    metrics["tiers"]["host_peak_bytes"] = run.host_tier_peak_bytes;  // one GPU's part, as every figure here
    metrics["tiers"]["nvme_peak_bytes"] = run.nvme_tier_peak_bytes;
  }
  if (s.inference->serving.prefix_caching) {
    std::int64_t prompt = 0, cached = 0;
    for (const auto& r : run.requests) {
      prompt += r.prompt_tokens;
      cached += r.cached_tokens;
    }
    metrics["prefix_cache"] = {{"cached_prompt_tokens", cached},
                               {"hit_rate", prompt > 0 ? static_cast<double>(cached) / prompt : 0.0},
                               {"evictions", run.prefix_cache_evictions},
                               {"dropped", run.prefixes_dropped}};
  }
  // An open-loop load above capacity: completions fall behind arrivals while requests arrive, and
  // the queue drains long after the last one. A request needs its own service time to finish, so
  // completions count over the arrival window shifted by an unqueued request's time in system (of the
  // earliest fifth of arrivals: the shortest wait for a first token plus the median time from
  // first to last token): a run a few service times long is not called unsustainable for the
  // requests still running at its end.
  if (s.inference->workload.arrival != Arrival::closed_loop && run.last_arrival_s > 0 && completed > 0) {
    const double offered = static_cast<double>(run.requests.size()) / run.last_arrival_s;
    std::vector<double> decoding;
    double shortest_wait = -1;
    for (std::size_t i = 0; i < std::max<std::size_t>(1, run.requests.size() / 5); ++i) {
      const auto& r = run.requests[i];
      if (r.finish_s < 0) continue;
      decoding.push_back(r.finish_s - r.first_token_s);
      const double wait = r.first_token_s - r.arrival_s;
      shortest_wait = shortest_wait < 0 ? wait : std::min(shortest_wait, wait);
    }
    double allowance = 0;
    if (!decoding.empty()) {
      std::nth_element(decoding.begin(), decoding.begin() + static_cast<std::ptrdiff_t>(decoding.size() / 2),
                       decoding.end());
      allowance = shortest_wait + decoding[decoding.size() / 2];
    }
    // Completions over the arrival window shifted by that allowance: what arrived is served then.
    std::int64_t within = 0;
    for (const auto& r : run.requests) {
      within += r.finish_s >= allowance && r.finish_s <= run.last_arrival_s + allowance;
    }
    const double served_while_arriving = within / run.last_arrival_s;
    const double drain = run.makespan_s - run.last_arrival_s;
    // A queue that keeps growing: the median wait for a first token of the last fifth of arrivals
    // exceeds the second fifth's by more than 5% of the arrival window (arrivals outpacing service
    // by about 8% or more; a stable load's waits stay level).
    auto median_ttft = [&](std::size_t fifth) {
      std::vector<double> waits;
      const std::size_t n = run.requests.size();
      for (std::size_t i = fifth * n / 5; i < (fifth + 1) * n / 5; ++i) {
        const auto& r = run.requests[i];
        if (r.first_token_s >= 0) waits.push_back(r.first_token_s - r.arrival_s);
      }
      if (waits.empty()) return 0.0;
      std::nth_element(waits.begin(), waits.begin() + static_cast<std::ptrdiff_t>(waits.size() / 2), waits.end());
      return waits[waits.size() / 2];
    };
    const double queue_growth = run.requests.size() >= 10 ? median_ttft(4) - median_ttft(1) : 0.0;
    const bool sustainable = served_while_arriving >= 0.9 * offered && queue_growth <= 0.05 * run.last_arrival_s;
    metrics["load"] = {{"offered_requests_per_s", offered}, {"served_requests_per_s_while_arriving", served_while_arriving},
                       {"service_allowance_s", allowance}, {"ttft_growth_s", queue_growth},
                       {"drain_after_last_arrival_s", drain},
                       {"sustainable", sustainable}};
    if (!sustainable) {
      notes.push_back("the load is unsustainable: " + std::to_string(offered) + " requests/s offered, " +
                      std::to_string(served_while_arriving) + " served while they arrived (allowing " +
                      std::to_string(allowance) + " s of service); the queue kept growing (the last fifth of arrivals "
                      "waited " + std::to_string(queue_growth) + " s longer for a first token than the second) and took " +
                      std::to_string(drain) + " s to drain after the last arrival");
    }
  }
  if (run.rejected > 0) {
    notes.push_back(std::to_string(run.rejected) + " requests were rejected: their prompts never fit in the KV cache");
  }
  // Neither completed nor rejected: the engine stopped with them outstanding (a scheduling dead end).
  const std::int64_t stranded = static_cast<std::int64_t>(run.requests.size()) - completed - run.rejected;
  if (stranded > 0) {
    notes.push_back(std::to_string(stranded) + " requests never completed: the scheduler could run none of them and nothing "
                    "was left to free their KV blocks; the figures cover the completed ones only");
  }
}

nlohmann::ordered_json disaggregation_report(const Scenario& s, const ServingRun& run, const ServingRun& prefill_run) {
  const Disaggregation& d = *s.inference->disaggregation;
  auto side = [&](InstanceRole role, int replicas, int tp, const ServingRun& r) {
    nlohmann::ordered_json j;
    j["replicas"] = replicas;
    j["tensor_parallel"] = tp;
    j["gpus"] = replicas * tp;
    j["gpu"] = side_cluster(s, role).gpu.name;
    j["kv_capacity_blocks"] = r.capacity_blocks;
    j["peak_kv_utilization"] = r.capacity_blocks > 0 ? static_cast<double>(r.peak_blocks_used) / static_cast<double>(r.capacity_blocks) : 0.0;
    j["iterations"] = r.iterations;
    j["preemptions"] = r.preemptions;
    return j;
  };
  std::vector<double> bytes, seconds, to_prefilled, transfer_share;
  double total_bytes = 0, prompt_tokens = 0;
  for (const RequestRecord& r : run.requests) {
    if (r.prefilled_s < 0 || r.first_token_s < 0) continue;
    bytes.push_back(r.kv_transfer_bytes);
    seconds.push_back(r.kv_transfer_s);
    to_prefilled.push_back(r.prefilled_s - r.arrival_s);
    const double ttft = r.first_token_s - r.arrival_s;
    transfer_share.push_back(ttft > 0 ? r.kv_transfer_s / ttft : 0.0);
    total_bytes += r.kv_transfer_bytes;
    prompt_tokens += r.prompt_tokens;
  }
  nlohmann::ordered_json out;
  out["prefill"] = side(InstanceRole::prefill, d.prefill_replicas, d.prefill_tensor_parallel, prefill_run);
  out["decode"] = side(InstanceRole::decode, d.decode_replicas, d.decode_tensor_parallel, run);
  out["kv_transfer"] = {{"requests", static_cast<std::int64_t>(bytes.size())},
                        {"bytes_total", total_bytes},
                        {"bytes_per_prompt_token", prompt_tokens > 0 ? total_bytes / prompt_tokens : 0.0},
                        {"bytes", summary(bytes)},
                        {"seconds", summary(seconds)}};
  out["ttft_s"] = {{"to_prefill_end", summary(to_prefilled)}, {"transfer_fraction", summary(transfer_share)}};
  return out;
}

std::string requests_csv(const ServingRun& run, bool disaggregated) {
  std::ostringstream out;
  out.precision(9);
  out << "id,replica,arrival_s,prompt_tokens,output_tokens,first_token_s,finish_s,ttft_s,e2e_s,preemptions,swaps";
  // A disaggregated request's prefill end and its KV transfer to the decode instance (`replica`).
  out << (disaggregated ? ",prefilled_s,kv_transfer_bytes,kv_transfer_s\n" : "\n");
  for (const auto& r : run.requests) {
    out << r.id << "," << r.replica << "," << r.arrival_s << "," << r.prompt_tokens << "," << r.output_tokens << ","
        << r.first_token_s << "," << r.finish_s << "," << (r.first_token_s - r.arrival_s) << ","
        << (r.finish_s - r.arrival_s) << "," << r.preemptions << "," << r.swaps;
    if (disaggregated) out << "," << r.prefilled_s << "," << r.kv_transfer_bytes << "," << r.kv_transfer_s;
    out << "\n";
  }
  return out.str();
}

std::string serving_trace(const ServingRun& run) {
  TraceDocument events;
  std::set<int> named;
  for (const auto& it : run.iteration_log) {
    if (named.insert(it.replica).second) {
      events.add({{"name", "process_name"}, {"ph", "M"}, {"pid", it.replica},
                  {"args", {{"name", "replica " + std::to_string(it.replica)}}}});
      events.add({{"name", "thread_name"}, {"ph", "M"}, {"pid", it.replica}, {"tid", 0}, {"args", {{"name", "compute"}}}});
    }
    events.add({{"name", it.prefill_tokens > 0 ? "iteration (prefill)" : "iteration"}, {"cat", "compute"}, {"ph", "X"},
                {"pid", it.replica}, {"tid", 0}, {"ts", it.start_s * 1e6}, {"dur", (it.end_s - it.start_s) * 1e6},
                {"args", {{"decode_sequences", it.decode}, {"prefill_tokens", it.prefill_tokens}}}});
  }
  double swap_out = -1, swap_in = -1, prefix_moved = -1, tiers_held = -1;
  for (const auto& k : run.kv_timeline) {
    const double moved = k.prefix_to_host_bytes + k.prefix_from_host_bytes + k.prefix_from_nvme_bytes + k.prefix_to_nvme_bytes;
    if (moved != prefix_moved) {
      prefix_moved = moved;
      events.add({{"name", "prefix tier bytes"}, {"ph", "C"}, {"pid", 0}, {"ts", k.time_s * 1e6},
                  {"args", {{"to host", k.prefix_to_host_bytes}, {"from host", k.prefix_from_host_bytes},
                            {"from NVMe", k.prefix_from_nvme_bytes}, {"to NVMe", k.prefix_to_nvme_bytes}}}});
    }
    if (k.host_tier_bytes + k.nvme_tier_bytes != tiers_held) {
      tiers_held = k.host_tier_bytes + k.nvme_tier_bytes;
      events.add({{"name", "tier occupancy bytes"}, {"ph", "C"}, {"pid", 0}, {"ts", k.time_s * 1e6},
                  {"args", {{"host", k.host_tier_bytes}, {"NVMe", k.nvme_tier_bytes}}}});
    }
    events.add({{"name", "KV occupancy"}, {"ph", "C"}, {"pid", 0}, {"ts", k.time_s * 1e6}, {"args", {{"fraction", k.utilization}}}});
    // A counter holds its value until the next event: one event per change is the whole track.
    if (k.swap_out_bytes != swap_out || k.swap_in_bytes != swap_in) {
      swap_out = k.swap_out_bytes;
      swap_in = k.swap_in_bytes;
      events.add({{"name", "host swap bytes"}, {"ph", "C"}, {"pid", 0}, {"ts", k.time_s * 1e6},
                  {"args", {{"out", swap_out}, {"in", swap_in}}}});
    }
    if (events.events() > 2 * ServingRun::kMaxLoggedIterations) break;
  }
  return std::move(events).finish();
}

}  // namespace memtwin
