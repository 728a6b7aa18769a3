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
        values.clear();
        std::ifstream in(d.file);
        for (double v; in >> v;) values.push_back(v);
        if (values.empty()) throw std::runtime_error(d.file + ": no lengths in the file");
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
  if (!w.trace.empty()) return read_trace(w.trace);
  Sampler arrivals(seed * 2 + 1), lengths(seed * 2 + 2), groups(seed * 2 + 3);
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
    r.prompt_tokens = std::min(draw_length(w.prompt_tokens, lengths), limit - 1);
    if (w.shared_prefix_groups > 0) {
      r.prefix_group = static_cast<int>(groups.next() % static_cast<std::uint64_t>(w.shared_prefix_groups));
      r.prompt_tokens = std::min(w.shared_prefix_tokens + r.prompt_tokens, limit - 1);
      r.prefix_tokens = std::min(w.shared_prefix_tokens, r.prompt_tokens);
    }
    r.output_tokens = std::max(1, std::min(draw_length(w.output_tokens, lengths), limit - r.prompt_tokens));
    out.push_back(r);
  }
  return out;
}

std::vector<Request> read_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read the trace");
  std::string header;
  std::getline(in, header);
  std::vector<std::string> columns;
  std::stringstream hs(header);
  for (std::string c; std::getline(hs, c, ',');) {
    while (!c.empty() && (c.back() == '\r' || c.back() == ' ')) c.pop_back();
    columns.push_back(c);
  }
  auto find = [&](std::initializer_list<const char*> names) {
    for (const char* n : names) {
      auto it = std::find(columns.begin(), columns.end(), n);
      if (it != columns.end()) return static_cast<int>(it - columns.begin());
    }
    return -1;
  };
  const int arrival = find({"arrival_s"}), stamp = find({"timestamp", "TIMESTAMP"});
  const int prompt = find({"prompt_tokens", "ContextTokens"}), output = find({"output_tokens", "GeneratedTokens"});
  if ((arrival < 0 && stamp < 0) || prompt < 0 || output < 0) {
    throw std::runtime_error(path + ":1: the header needs arrival_s (or timestamp), prompt_tokens (or ContextTokens) "
                             "and output_tokens (or GeneratedTokens)");
  }
  std::vector<Request> out;
  double first = 0;
  int line_no = 1;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty() || line == "\r") continue;
    std::vector<std::string> cells;
    std::stringstream ls(line);
    for (std::string c; std::getline(ls, c, ',');) cells.push_back(c);
    auto cell = [&](int i) -> const std::string& {
      if (i >= static_cast<int>(cells.size())) throw std::runtime_error(path + ":" + std::to_string(line_no) + ": too few columns");
      return cells[i];
    };
    Request r;
    r.id = static_cast<std::int64_t>(out.size());
    try {
      if (arrival >= 0) {
        r.arrival_s = std::stod(cell(arrival));
      } else {
        // Absolute timestamps: seconds, or an ISO-like "YYYY-MM-DD hh:mm:ss(.fff)" (time of day used).
        const std::string& s = cell(stamp);
        const auto colon = s.find(':');
        double seconds;
        if (colon != std::string::npos && colon >= 2) {
          const int h = std::stoi(s.substr(colon - 2, 2)), m = std::stoi(s.substr(colon + 1, 2));
          seconds = h * 3600.0 + m * 60.0 + std::stod(s.substr(colon + 4));
        } else {
          seconds = std::stod(s);
        }
        if (out.empty()) first = seconds;
        r.arrival_s = seconds - first;
      }
      r.prompt_tokens = std::max(1, std::stoi(cell(prompt)));
      r.output_tokens = std::max(1, std::stoi(cell(output)));
    } catch (const std::invalid_argument&) {
      throw std::runtime_error(path + ":" + std::to_string(line_no) + ": not a number");
    }
    out.push_back(r);
  }
  std::stable_sort(out.begin(), out.end(), [](const Request& a, const Request& b) { return a.arrival_s < b.arrival_s; });
  return out;
}

}  // namespace memtwin
