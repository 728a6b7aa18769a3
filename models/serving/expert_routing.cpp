#include "models/serving/expert_routing.h"

#include <numeric>
#include <stdexcept>
#include <string>

namespace memtwin {

std::vector<ExpertRun> expert_runs(int rows, int experts, int top_k, int expert) {
  if (top_k < 1 || top_k > experts || expert < 0 || expert >= experts || rows < 0) {
    throw std::invalid_argument("expert_runs: expert " + std::to_string(expert) + " of " + std::to_string(experts) + " with top-" +
                                std::to_string(top_k) + " over " + std::to_string(rows) + " rows");
  }
  // (t x top_k + j) mod experts repeats with period experts / gcd in t.
  const int period = experts / std::gcd(top_k, experts);
  std::vector<ExpertRun> runs;
  for (int j = 0; j < top_k; ++j) {
    for (int t = 0; t < period && t < rows; ++t) {
      if ((static_cast<long long>(t) * top_k + j) % experts != expert) continue;
      runs.push_back({t, period, (rows - 1 - t) / period + 1});
      break;  // one first token per choice within a period
    }
  }
  return runs;
}

}  // namespace memtwin
