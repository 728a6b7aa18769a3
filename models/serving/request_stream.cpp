#include "models/serving/request_stream.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace memtwin {

std::uint64_t Sampler::next() {
  std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double Sampler::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double Sampler::exponential(double mean) { return -mean * std::log1p(-uniform()); }

double Sampler::normal(double mean, double std) {
  // Box-Muller; one value per call keeps the stream simple to reason about.
  const double u1 = 1.0 - uniform(), u2 = uniform();
  return mean + std * std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * M_PI * u2);
}

double Sampler::gamma(double shape, double scale) {
  if (shape < 1) {  // boost to shape + 1, then scale down (Marsaglia-Tsang's note)
    return gamma(shape + 1, scale) * std::pow(1.0 - uniform(), 1.0 / shape);
  }
  const double d = shape - 1.0 / 3, c = 1 / std::sqrt(9 * d);
  for (;;) {
    double x, v;
    do {
      x = normal(0, 1);
      v = 1 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = 1.0 - uniform();
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v * scale;
  }
}

namespace {

int draw_length(const LengthDistribution& d, Sampler& s) {
  double x = 0;
  switch (d.dist) {
    case LengthDist::fixed: x = d.value; break;
    case LengthDist::uniform: x = d.min + s.uniform() * (d.max - d.min + 1); break;
    case LengthDist::normal: x = s.normal(d.mean, d.std); break;
    case LengthDist::lognormal: {
      // Parameters of the underlying normal from the distribution's own mean and std.
      const double variance = d.std * d.std, mean = d.mean;
      const double sigma2 = std::log(1 + variance / (mean * mean));
      x = std::exp(s.normal(std::log(mean) - sigma2 / 2, std::sqrt(sigma2)));
      break;
    }
    case LengthDist::empirical: {
      static thread_local std::string cached_path;
      static thread_local std::vector<double> values;
      if (cached_path != d.file) {
        values = read_lengths(d.file);
        cached_path = d.file;
      }
      x = values[static_cast<std::size_t>(s.uniform() * values.size())];
      break;
    }
  }
  if (d.max > 0) x = std::min(x, d.max);
  return std::max(static_cast<int>(std::lround(std::max(x, d.min))), 1);
}

}  // namespace

std::vector<Request> generate_requests(const Inference& inf, std::uint64_t seed) {
  const WorkloadSpec& w = inf.workload;
  if (!w.trace.empty()) {
    std::vector<Request> requests = read_trace(w.trace);
    fit_trace_to_context(requests, w.trace, inf.serving.max_model_len);
    if (w.rate_per_s > 0) scale_trace_to_rate(requests, w.trace, w.rate_per_s);
    return requests;
  }
  Sampler arrivals(seed * 2 + 1), lengths(seed * 2 + 2), groups(seed * 2 + 3);
  const std::vector<LengthPair> pairs = w.length_pairs.empty() ? std::vector<LengthPair>{} : read_length_pairs(w.length_pairs);
  std::vector<Request> out;
  out.reserve(static_cast<std::size_t>(w.requests));
  double t = 0;
  const int limit = inf.serving.max_model_len;
  for (std::int64_t i = 0; i < w.requests; ++i) {
    Request r;
    r.id = i;
    if (w.arrival != Arrival::closed_loop) {
      const double mean_gap = 1.0 / w.rate_per_s;
      switch (w.arrival) {
        case Arrival::poisson: t += arrivals.exponential(mean_gap); break;
        case Arrival::gamma: t += arrivals.gamma(1 / (w.cv * w.cv), mean_gap * w.cv * w.cv); break;
        case Arrival::constant: t += mean_gap; break;
        case Arrival::closed_loop: break;
      }
      r.arrival_s = t;
    }
    // One row of the pairs file, both lengths from it; or each length from its distribution.
    const LengthPair* pair = pairs.empty() ? nullptr : &pairs[static_cast<std::size_t>(lengths.uniform() * static_cast<double>(pairs.size()))];
    r.prompt_tokens = std::min(pair ? pair->prompt : draw_length(w.prompt_tokens, lengths), limit - 1);
    if (w.shared_prefix_groups > 0) {
      r.prefix_group = static_cast<int>(groups.next() % static_cast<std::uint64_t>(w.shared_prefix_groups));
      r.prompt_tokens = std::min(w.shared_prefix_tokens + r.prompt_tokens, limit - 1);
      r.prefix_tokens = std::min(w.shared_prefix_tokens, r.prompt_tokens);
    }
    r.output_tokens = std::max(1, std::min(pair ? pair->output : draw_length(w.output_tokens, lengths), limit - r.prompt_tokens));
    out.push_back(r);
  }
  return out;
}

}  // namespace memtwin
