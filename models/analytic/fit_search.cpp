#include "models/analytic/fit_search.h"

#include <set>

namespace memtwin {
namespace {

constexpr int kNeighbourhood = 32;  // invalid values probed around a bisection point before giving up on it

class Search {
 public:
  Search(const std::function<Probe(std::int64_t)>& probe, FitAnswer& answer) : probe_(probe), answer_(answer) {}

  Probe at(std::int64_t v) {
    ++answer_.evaluations;
    return probe_(v);
  }

  // The valid value nearest to `mid` inside [left, right] within the neighbourhood, and its outcome.
  std::optional<std::pair<std::int64_t, Probe>> near(std::int64_t mid, std::int64_t left, std::int64_t right) {
    for (int d = 0; d <= kNeighbourhood; ++d) {
      for (std::int64_t v : {mid - d, mid + d}) {
        if (v < left || v > right || (d == 0 && v != mid)) continue;
        Probe p = at(v);
        if (p != Probe::invalid) return std::make_pair(v, p);
        if (d == 0) break;
      }
    }
    return std::nullopt;
  }

 private:
  const std::function<Probe(std::int64_t)>& probe_;
  FitAnswer& answer_;
};

}  // namespace

FitAnswer fit_search(const std::function<Probe(std::int64_t)>& probe, std::int64_t lo, std::int64_t hi,
                     FitDirection direction) {
  FitAnswer answer;
  Search search(probe, answer);
  const bool largest = direction == FitDirection::largest;
  // Phase 1: powers of two from the favourable end find an interval [a, b] holding the boundary
  // cheaply (most knobs are powers of two in practice, and divisibility rules keep them valid).
  std::int64_t left = lo, right = hi;
  std::optional<std::int64_t> good, bad;
  for (std::int64_t v = lo; v <= hi; v = v * 2) {
    Probe p = search.at(v);
    if (p == Probe::invalid) continue;
    const bool fits = p == Probe::fits;
    if (largest) {
      if (fits) { good = v; left = v + 1; } else { bad = v; right = v - 1; break; }
    } else {
      if (fits) { good = v; right = v - 1; break; } else { bad = v; left = v + 1; }
    }
    if (v > hi / 2) break;
  }
  // Phase 2: bisection on valid values; a point with no valid neighbour shrinks the interval.
  while (left <= right) {
    const std::int64_t mid = left + (right - left) / 2;
    auto found = search.near(mid, left, right);
    if (!found) {
      // Nothing valid near mid: drop that stretch on the side away from the answer found so far.
      const std::int64_t lo_gap = std::max(left, mid - kNeighbourhood), hi_gap = std::min(right, mid + kNeighbourhood);
      if (largest) right = lo_gap - 1; else left = hi_gap + 1;
      continue;
    }
    const auto [v, p] = *found;
    const bool fits = p == Probe::fits;
    if (largest) {
      if (fits) { good = v; left = v + 1; } else { bad = v; right = v - 1; }
    } else {
      if (fits) { good = v; right = v - 1; } else { bad = v; left = v + 1; }
    }
  }
  answer.value = good;
  answer.first_failing = bad;
  return answer;
}

std::optional<FitDirection> default_fit_direction(const std::string& key) {
  static const std::set<std::string> grow = {
      "training.micro_batch", "training.seq_len", "training.global_batch", "training.fine_tuning.lora_rank",
      "inference.serving.max_model_len", "inference.serving.max_num_seqs", "inference.serving.max_num_batched_tokens"};
  static const std::set<std::string> shrink = {"cluster.nodes", "cluster.gpus_per_node",
                                               "training.parallelism.tensor", "training.parallelism.pipeline",
                                               "inference.serving.tensor_parallel"};
  if (grow.count(key)) return FitDirection::largest;
  if (shrink.count(key)) return FitDirection::smallest;
  return std::nullopt;
}

}  // namespace memtwin
