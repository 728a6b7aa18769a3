#include "hw/host/real_model.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "kernels/kv_kernels.h"
#include "models/scenario/scenario_error.h"

namespace memtwin::hw {

namespace {

using nlohmann::json;

[[noreturn]] void refuse(const std::filesystem::path& file, const std::string& key, const std::string& message) {
  throw ScenarioError({file.string(), 0, 0}, key, message);
}

template <typename T>
T field(const json& j, const char* key, const std::filesystem::path& file) {
  if (!j.contains(key)) refuse(file, key, "missing (the file is not what scripts/real_model/convert_gguf.py writes)");
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    refuse(file, key, "has the wrong type: " + j.at(key).dump());
  }
}

int positive(const json& j, const char* key, const std::filesystem::path& file, int most) {
  const int v = field<int>(j, key, file);
  if (v <= 0 || v > most) refuse(file, key, "must be between 1 and " + std::to_string(most) + ", got " + std::to_string(v));
  return v;
}

// y[rows, out] = beta y + x[rows, in] W^T, with W [out, in] as the file stores a linear layer.
void linear(int rows, int out, int in, const float* x, const float* w, float beta, float* y) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1.0f, x, in, w, in, beta, y, out);
}

// Each row scaled to unit root mean square, then by the learned weight.
void rms_norm(const float* x, const float* weight, int rows, int hidden, double eps, float* y) {
  for (int r = 0; r < rows; ++r) {
    const float* in = x + static_cast<std::size_t>(r) * hidden;
    float* out = y + static_cast<std::size_t>(r) * hidden;
    double sum = 0;
    for (int i = 0; i < hidden; ++i) sum += static_cast<double>(in[i]) * in[i];
    const auto scale = static_cast<float>(1.0 / std::sqrt(sum / hidden + eps));
    for (int i = 0; i < hidden; ++i) out[i] = in[i] * scale * weight[i];
  }
}

// Rotate-half rotary embedding of `heads` slices of head_dim in each row, row t at position t.
void rotary(float* x, int rows, int heads, int head_dim, double theta) {
  const int half = head_dim / 2;
  std::vector<double> inverse_frequency(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i) inverse_frequency[static_cast<std::size_t>(i)] = std::pow(theta, -2.0 * i / head_dim);
  for (int t = 0; t < rows; ++t) {
    for (int h = 0; h < heads; ++h) {
      float* v = x + (static_cast<std::size_t>(t) * heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const double angle = t * inverse_frequency[static_cast<std::size_t>(i)];
        const auto c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
        const float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
  }
}

}  // namespace

RealModel RealModel::load(const std::filesystem::path& dir) {
  const std::filesystem::path config_file = dir / "model.json", weights_file = dir / "weights.f32";
  std::ifstream in(config_file);
  if (!in) {
    refuse(config_file, "model", "cannot be read; scripts/real-model.sh installs the model and converts it there");
  }
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    refuse(config_file, "model", std::string("is not JSON: ") + e.what());
  }
  if (!j.is_object()) refuse(config_file, "model", "must be a JSON object");
  RealModel m;
  RealModelConfig& c = m.config_;
  if (field<std::string>(j, "architecture", config_file) != "llama") {
    refuse(config_file, "architecture", "must be 'llama', got '" + j.at("architecture").get<std::string>() + "'");
  }
  c.name = field<std::string>(j, "name", config_file);
  c.layers = positive(j, "layers", config_file, 1024);
  c.hidden = positive(j, "hidden", config_file, 1 << 16);
  c.intermediate = positive(j, "intermediate", config_file, 1 << 18);
  c.heads = positive(j, "heads", config_file, 1024);
  c.kv_heads = positive(j, "kv_heads", config_file, 1024);
  c.head_dim = positive(j, "head_dim", config_file, 1024);
  c.vocab = positive(j, "vocab", config_file, 1 << 22);
  c.rope_theta = field<double>(j, "rope_theta", config_file);
  c.rms_norm_eps = field<double>(j, "rms_norm_eps", config_file);
  c.tied_embeddings = field<bool>(j, "tied_embeddings", config_file);
  if (!(c.rope_theta > 1)) refuse(config_file, "rope_theta", "must be greater than 1");
  if (!(c.rms_norm_eps > 0 && c.rms_norm_eps < 1)) refuse(config_file, "rms_norm_eps", "must be in (0, 1)");
  if (c.heads * c.head_dim != c.hidden) refuse(config_file, "head_dim", "heads x head_dim must equal hidden");
  if (c.heads % c.kv_heads != 0) refuse(config_file, "kv_heads", "must divide heads");
  if (j.contains("source") && j["source"].is_object() && j["source"].contains("sha256") && j["source"]["sha256"].is_string()) {
    c.source_sha256 = j["source"]["sha256"].get<std::string>();
  }

  // The tensor index, checked against the architecture, then the floats.
  std::map<std::string, std::pair<std::size_t, std::size_t>> tensors;  // name -> offset, floats
  std::size_t floats = 0;
  const json index = field<json>(j, "tensors", config_file);
  if (!index.is_array()) refuse(config_file, "tensors", "must be a list");
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> shapes;
  for (std::size_t i = 0; i < index.size(); ++i) {
    const std::string key = "tensors[" + std::to_string(i) + "]";
    const json& t = index[i];
    if (!t.is_object() || !t.contains("name") || !t.contains("shape") || !t.contains("offset") || !t["name"].is_string() ||
        !t["offset"].is_number_unsigned() || !t["shape"].is_array() || t["shape"].size() != 2 ||
        !t["shape"][0].is_number_unsigned() || !t["shape"][1].is_number_unsigned()) {
      refuse(config_file, key, "must hold name, shape [rows, cols] and offset");
    }
    const auto rows = t["shape"][0].get<std::int64_t>(), cols = t["shape"][1].get<std::int64_t>();
    const auto offset = t["offset"].get<std::size_t>();
    if (rows <= 0 || cols <= 0 || rows > (1LL << 31) / cols) refuse(config_file, key + ".shape", "is empty or too large");
    const auto count = static_cast<std::size_t>(rows * cols);
    tensors[t["name"].get<std::string>()] = {offset, count};
    shapes[t["name"].get<std::string>()] = {rows, cols};
    floats = std::max(floats, offset + count);
  }
  std::error_code error;
  const auto bytes = std::filesystem::file_size(weights_file, error);
  if (error) refuse(weights_file, "weights", "cannot be read: " + error.message());
  if (bytes != floats * sizeof(float)) {
    refuse(weights_file, "weights", "holds " + std::to_string(bytes) + " bytes; model.json's tensors need " +
                                        std::to_string(floats * sizeof(float)));
  }
  m.weights_.resize(floats);
  std::ifstream w(weights_file, std::ios::binary);
  if (!w.read(reinterpret_cast<char*>(m.weights_.data()), static_cast<std::streamsize>(bytes))) {
    refuse(weights_file, "weights", "could not be read whole");
  }
  auto tensor = [&](const std::string& name, std::int64_t rows, std::int64_t cols) -> const float* {
    const auto found = shapes.find(name);
    if (found == shapes.end()) refuse(config_file, "tensors", "has no '" + name + "'");
    if (found->second != std::make_pair(rows, cols)) {
      refuse(config_file, "tensors", "'" + name + "' is " + std::to_string(found->second.first) + " x " +
                                         std::to_string(found->second.second) + ", the architecture needs " +
                                         std::to_string(rows) + " x " + std::to_string(cols));
    }
    return m.weights_.data() + tensors.at(name).first;
  };
  const int h = c.hidden, q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim, inner = c.intermediate;
  m.embeddings_ = tensor("token_embd.weight", c.vocab, h);
  m.output_norm_ = tensor("output_norm.weight", 1, h);
  m.output_ = c.tied_embeddings ? m.embeddings_ : tensor("output.weight", c.vocab, h);
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    m.layers_.push_back({tensor(p + "attn_norm.weight", 1, h), tensor(p + "attn_q.weight", q, h), tensor(p + "attn_k.weight", kv, h),
                         tensor(p + "attn_v.weight", kv, h), tensor(p + "attn_output.weight", h, q),
                         tensor(p + "ffn_norm.weight", 1, h), tensor(p + "ffn_gate.weight", inner, h),
                         tensor(p + "ffn_up.weight", inner, h), tensor(p + "ffn_down.weight", h, inner)});
  }
  return m;
}

std::vector<float> RealModel::logits(const std::vector<int>& tokens, kernels::KvFormat format, double* attention_seconds) const {
  const RealModelConfig& c = config_;
  if (format.head_dim != c.head_dim) throw std::invalid_argument("the KV format's head_dim is not the model's");
  format.validate();
  const int n = static_cast<int>(tokens.size());
  if (n == 0) return {};
  const int h = c.hidden, q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim, inner = c.intermediate;
  auto rows = [&](int width) { return std::vector<float>(static_cast<std::size_t>(n) * width); };
  std::vector<float> x = rows(h), normed = rows(h), queries = rows(q), keys = rows(kv), values = rows(kv), attended = rows(q),
                     gate = rows(inner), up = rows(inner);
  for (int t = 0; t < n; ++t) {
    if (tokens[static_cast<std::size_t>(t)] < 0 || tokens[static_cast<std::size_t>(t)] >= c.vocab) {
      throw std::invalid_argument("token " + std::to_string(tokens[static_cast<std::size_t>(t)]) + " is outside the vocabulary");
    }
    std::copy_n(embeddings_ + static_cast<std::size_t>(tokens[static_cast<std::size_t>(t)]) * h, h,
                x.begin() + static_cast<std::ptrdiff_t>(t) * h);
  }
  // One paged cache per layer; position t in slot t. Every position attends as its own query
  // against the cache up to itself, so the decode kernel computes causal attention.
  kernels::PagedShape shape;
  shape.block_size = 16;
  shape.kv_heads = c.kv_heads;
  shape.format = format;
  shape.num_blocks = (n + shape.block_size - 1) / shape.block_size;
  std::vector<std::int64_t> slots(static_cast<std::size_t>(n));
  std::iota(slots.begin(), slots.end(), 0);
  std::vector<std::int32_t> table(static_cast<std::size_t>(n) * shape.num_blocks), context(static_cast<std::size_t>(n));
  for (int t = 0; t < n; ++t) {
    context[static_cast<std::size_t>(t)] = t + 1;
    std::iota(table.begin() + static_cast<std::ptrdiff_t>(t) * shape.num_blocks,
              table.begin() + static_cast<std::ptrdiff_t>(t + 1) * shape.num_blocks, 0);
  }
  std::vector<std::uint8_t> k_cache(shape.bytes()), v_cache(shape.bytes());
  for (const Layer& w : layers_) {
    rms_norm(x.data(), w.attn_norm, n, h, c.rms_norm_eps, normed.data());
    linear(n, q, h, normed.data(), w.q, 0.0f, queries.data());
    linear(n, kv, h, normed.data(), w.k, 0.0f, keys.data());
    linear(n, kv, h, normed.data(), w.v, 0.0f, values.data());
    rotary(queries.data(), n, c.heads, c.head_dim, c.rope_theta);
    rotary(keys.data(), n, c.kv_heads, c.head_dim, c.rope_theta);
    kernels::write_paged(keys.data(), slots.data(), n, shape, k_cache.data());
    kernels::write_paged(values.data(), slots.data(), n, shape, v_cache.data());
    const auto started = std::chrono::steady_clock::now();
    kernels::decode_attention(kernels::make_decode_args(queries.data(), k_cache.data(), v_cache.data(), table.data(),
                                                        context.data(), attended.data(), n, c.heads, shape.num_blocks, shape));
    if (attention_seconds) *attention_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    linear(n, h, q, attended.data(), w.o, 1.0f, x.data());
    rms_norm(x.data(), w.ffn_norm, n, h, c.rms_norm_eps, normed.data());
    linear(n, inner, h, normed.data(), w.gate, 0.0f, gate.data());
    linear(n, inner, h, normed.data(), w.up, 0.0f, up.data());
    for (std::size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];  // SwiGLU
    linear(n, h, inner, gate.data(), w.down, 1.0f, x.data());
  }
  rms_norm(x.data(), output_norm_, n, h, c.rms_norm_eps, normed.data());
  std::vector<float> out = rows(c.vocab);
  linear(n, c.vocab, h, normed.data(), output_, 0.0f, out.data());
  return out;
}

}  // namespace memtwin::hw
