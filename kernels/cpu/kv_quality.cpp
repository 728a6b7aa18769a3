#include "kernels/kv_quality.h"

#include <algorithm>
#include <cmath>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <stdexcept>

#include "kernels/kv_kernels.h"

namespace memtwin::kernels {
namespace {

KvTensor normal_tensor(int tokens, int kv_heads, int head_dim, std::uint64_t seed, bool outliers) {
  KvTensor t{tokens, kv_heads, head_dim, {}};
  t.data.resize(static_cast<std::size_t>(tokens) * kv_heads * head_dim);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (std::size_t i = 0; i < t.data.size(); ++i) {
    const int channel = static_cast<int>(i % head_dim);
    const float scale = outliers && channel % 29 == 3 ? 10.f + static_cast<float>(channel % 41) : 1.f;
    t.data[i] = normal(rng) * scale;
  }
  return t;
}

KvTensor roundtrip(const KvTensor& x, const KvFormat& f) {
  KvTensor y = x;
  std::vector<std::uint8_t> bytes(f.vector_bytes());
  for (std::size_t v = 0; v < x.data.size() / x.head_dim; ++v) {
    quantize_vector(&x.data[v * x.head_dim], f, bytes.data());
    dequantize_vector(bytes.data(), f, &y.data[v * x.head_dim]);
  }
  return y;
}

double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(a[i]) * a[i];
  }
  return den > 0 ? std::sqrt(num / den) : 0;
}

// Attention of each query head over all tokens: probabilities [q_heads][tokens] and outputs.
void attend(const std::vector<float>& q, const KvTensor& k, const KvTensor& v, int q_heads,
            std::vector<std::vector<double>>& probs, std::vector<float>& out) {
  const int group = q_heads / k.kv_heads, hd = k.head_dim;
  const double scale = 1 / std::sqrt(static_cast<double>(hd));
  probs.assign(q_heads, std::vector<double>(k.tokens));
  out.assign(static_cast<std::size_t>(q_heads) * hd, 0.f);
  for (int h = 0; h < q_heads; ++h) {
    const int kvh = h / group;
    double m = -1e300;
    for (int t = 0; t < k.tokens; ++t) {
      double dot = 0;
      for (int i = 0; i < hd; ++i) dot += q[h * hd + i] * k.data[(static_cast<std::size_t>(t) * k.kv_heads + kvh) * hd + i];
      probs[h][t] = dot * scale;
      m = std::max(m, probs[h][t]);
    }
    double sum = 0;
    for (double& p : probs[h]) sum += (p = std::exp(p - m));
    for (double& p : probs[h]) p /= sum;
    for (int i = 0; i < hd; ++i) {
      double acc = 0;
      for (int t = 0; t < k.tokens; ++t) acc += probs[h][t] * v.data[(static_cast<std::size_t>(t) * v.kv_heads + kvh) * hd + i];
      out[h * hd + i] = static_cast<float>(acc);
    }
  }
}

std::vector<int> top_k(const std::vector<double>& p, int k) {
  std::vector<int> idx(p.size());
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min<int>(k, static_cast<int>(idx.size()));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) { return p[a] > p[b]; });
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

}  // namespace

KvTensor synthetic_keys(int tokens, int kv_heads, int head_dim, std::uint64_t seed) {
  return normal_tensor(tokens, kv_heads, head_dim, seed, true);
}

KvTensor synthetic_values(int tokens, int kv_heads, int head_dim, std::uint64_t seed) {
  return normal_tensor(tokens, kv_heads, head_dim, seed, false);
}

std::size_t checked_elements(const std::vector<long>& shape, std::size_t element, std::uintmax_t available,
                             const std::string& path) {
  for (long d : shape) {
    if (d < 1 || d >= (1L << 31)) throw std::runtime_error(path + ": dimension " + std::to_string(d) + " is out of range");
  }
  std::uintmax_t n = 1;
  for (long d : shape) {
    if (n > available / element / static_cast<std::uintmax_t>(d)) {
      throw std::runtime_error(path + ": the file is shorter than its shape says");
    }
    n *= static_cast<std::uintmax_t>(d);
  }
  return static_cast<std::size_t>(n);
}

KvTensor read_npy(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw std::runtime_error(path + ": cannot read (not a regular file)");
  const std::uintmax_t file_bytes = std::filesystem::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (!in || ec) throw std::runtime_error(path + ": cannot read");
  char magic[6];
  in.read(magic, 6);
  if (!in || std::memcmp(magic, "\x93NUMPY", 6) != 0) throw std::runtime_error(path + ": not a .npy file");
  unsigned char version[2];
  in.read(reinterpret_cast<char*>(version), 2);
  std::uint32_t header_len = 0;
  if (version[0] == 1) {
    std::uint16_t len16;
    in.read(reinterpret_cast<char*>(&len16), 2);
    header_len = len16;
  } else {
    in.read(reinterpret_cast<char*>(&header_len), 4);
  }
  if (!in || header_len > (1u << 20) || header_len > file_bytes) throw std::runtime_error(path + ": not a .npy file (header length)");
  std::string header(header_len, '\0');
  in.read(header.data(), header_len);
  const bool f32 = header.find("'<f4'") != std::string::npos, f16 = header.find("'<f2'") != std::string::npos;
  if (!f32 && !f16) throw std::runtime_error(path + ": only little-endian float32 or float16 arrays are read");
  if (header.find("'fortran_order': True") != std::string::npos) throw std::runtime_error(path + ": Fortran order is not supported");
  const auto open = header.find('('), close = header.find(')');
  if (open == std::string::npos || close == std::string::npos || close < open) {
    throw std::runtime_error(path + ": its header has no shape");
  }
  std::vector<long> shape;
  std::string dims = header.substr(open + 1, close - open - 1);
  for (std::size_t pos = 0; pos < dims.size();) {
    const auto comma = dims.find(',', pos);
    std::string part = dims.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    part.erase(0, part.find_first_not_of(' '));
    part.erase(part.find_last_not_of(' ') + 1);
    if (!part.empty()) {
      long d = 0;
      const auto [end, err] = std::from_chars(part.data(), part.data() + part.size(), d);
      if (err != std::errc() || end != part.data() + part.size()) throw std::runtime_error(path + ": shape entry '" + part + "' is not a number");
      shape.push_back(d);
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (shape.size() != 3) throw std::runtime_error(path + ": expected shape [tokens, kv_heads, head_dim]");
  const std::uintmax_t data_bytes = file_bytes - std::min<std::uintmax_t>(file_bytes, 10 + header_len);
  const std::size_t n = checked_elements(shape, f32 ? 4 : 2, data_bytes, path);
  KvTensor t{static_cast<int>(shape[0]), static_cast<int>(shape[1]), static_cast<int>(shape[2]), {}};
  t.data.resize(n);
  if (f32) {
    in.read(reinterpret_cast<char*>(t.data.data()), static_cast<std::streamsize>(n * 4));
  } else {
    std::vector<std::uint16_t> halves(n);
    in.read(reinterpret_cast<char*>(halves.data()), static_cast<std::streamsize>(n * 2));
    for (std::size_t i = 0; i < n; ++i) t.data[i] = half_to_float(halves[i]);
  }
  if (!in) throw std::runtime_error(path + ": the file is shorter than its shape says");
  return t;
}

QualityReport measure_quality(const KvTensor& keys, const KvTensor& values, const KvFormat& f, int q_heads, int k,
                              std::uint64_t seed) {
  if (keys.head_dim != f.head_dim || values.head_dim != f.head_dim || keys.tokens != values.tokens ||
      keys.kv_heads != values.kv_heads || q_heads % keys.kv_heads != 0) {
    throw std::invalid_argument("measure_quality: K, V, the format and the query heads do not agree in shape");
  }
  f.validate();
  QualityReport r;
  const KvTensor kq = roundtrip(keys, f), vq = roundtrip(values, f);
  r.key_error = relative_error(keys.data, kq.data);
  r.value_error = relative_error(values.data, vq.data);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> q(static_cast<std::size_t>(q_heads) * f.head_dim);
  for (auto& x : q) x = normal(rng);
  std::vector<std::vector<double>> p_ref, p_q;
  std::vector<float> out_ref, out_q;
  attend(q, keys, values, q_heads, p_ref, out_ref);
  attend(q, kq, vq, q_heads, p_q, out_q);
  r.output_error = relative_error(out_ref, out_q);
  double overlap = 0;
  for (int h = 0; h < q_heads; ++h) {
    const auto a = top_k(p_ref[h], k), b = top_k(p_q[h], k);
    std::vector<int> both;
    std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
    overlap += static_cast<double>(both.size()) / a.size();
  }
  r.topk_overlap = overlap / q_heads;
  r.bytes_per_token = 2.0 * keys.kv_heads * f.vector_bytes();
  return r;
}

}  // namespace memtwin::kernels
