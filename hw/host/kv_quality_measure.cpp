#include "hw/host/kv_quality_measure.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace memtwin::hw {

namespace {

// log softmax of a row, in double.
std::vector<double> log_probabilities(const float* row, int n) {
  const float peak = *std::max_element(row, row + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(row[i]) - peak);
  const double log_sum = peak + std::log(sum);
  std::vector<double> out(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = row[i] - log_sum;
  return out;
}

}  // namespace

std::vector<KvQualityMeasure> measure_kv_quality(const RealModel& model, const std::vector<std::vector<int>>& texts,
                                                 const std::vector<kernels::KvFormat>& formats,
                                                 const kernels::KvFormat& reference) {
  const int vocab = model.config().vocab;
  struct Sums {
    double nll = 0, kl = 0, attention_s = 0;
    std::size_t agree = 0;
  };
  std::vector<Sums> sums(formats.size());
  double reference_nll = 0;
  std::size_t positions = 0;
  for (const std::vector<int>& tokens : texts) {
    if (tokens.size() < 2) throw std::invalid_argument("a text to measure quality on needs at least two tokens");
    const std::vector<float> theirs = model.logits(tokens, reference);
    std::vector<std::vector<double>> reference_log_probs;
    std::vector<std::ptrdiff_t> reference_top;
    for (std::size_t t = 0; t + 1 < tokens.size(); ++t) {
      const float* b = theirs.data() + t * vocab;
      reference_log_probs.push_back(log_probabilities(b, vocab));
      reference_top.push_back(std::max_element(b, b + vocab) - b);
      reference_nll -= reference_log_probs.back()[static_cast<std::size_t>(tokens[t + 1])];
    }
    positions += tokens.size() - 1;
    for (std::size_t f = 0; f < formats.size(); ++f) {
      const std::vector<float> ours = model.logits(tokens, formats[f], &sums[f].attention_s);
      for (std::size_t t = 0; t + 1 < tokens.size(); ++t) {
        const float* a = ours.data() + t * vocab;
        const std::vector<double> p = log_probabilities(a, vocab);
        const std::vector<double>& q = reference_log_probs[t];
        sums[f].nll -= p[static_cast<std::size_t>(tokens[t + 1])];
        for (std::size_t i = 0; i < p.size(); ++i) sums[f].kl += std::exp(q[i]) * (q[i] - p[i]);
        sums[f].agree += (std::max_element(a, a + vocab) - a) == reference_top[t] ? 1 : 0;
      }
    }
  }
  const auto n = static_cast<double>(positions);
  std::vector<KvQualityMeasure> out;
  for (const Sums& s : sums) {
    KvQualityMeasure m;
    m.positions = positions;
    m.perplexity = std::exp(s.nll / n);
    m.reference_perplexity = std::exp(reference_nll / n);
    m.perplexity_delta = m.perplexity - m.reference_perplexity;
    m.kl = s.kl / n;
    m.token_agreement = static_cast<double>(s.agree) / n;
    m.attention_s_per_token = s.attention_s / static_cast<double>(positions + texts.size());  // every position attends
    out.push_back(m);
  }
  return out;
}

}  // namespace memtwin::hw
