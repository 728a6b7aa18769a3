#include "hw/host/real_model.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>

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
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number past a double's range
    refuse(config_file, "model", std::string("is not JSON memtwin can read: ") + e.what());
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
    if (offset > std::numeric_limits<std::size_t>::max() / sizeof(float) - count) {
      refuse(config_file, key + ".offset", "is past any file's end");  // offset + count floats, in bytes, would wrap
    }
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
  RealWeights& r = m.real_;
  r.rope_theta = c.rope_theta;
  r.rms_norm_eps = c.rms_norm_eps;
  r.embeddings = tensor("token_embd.weight", c.vocab, h);
  r.output_norm = tensor("output_norm.weight", 1, h);
  r.output = c.tied_embeddings ? r.embeddings : tensor("output.weight", c.vocab, h);
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    r.layers.push_back({tensor(p + "attn_norm.weight", 1, h), tensor(p + "attn_q.weight", q, h), tensor(p + "attn_k.weight", kv, h),
                         tensor(p + "attn_v.weight", kv, h), tensor(p + "attn_output.weight", h, q),
                         tensor(p + "ffn_norm.weight", 1, h), tensor(p + "ffn_gate.weight", inner, h),
                         tensor(p + "ffn_up.weight", inner, h), tensor(p + "ffn_down.weight", h, inner)});
  }
  return m;
}

}  // namespace memtwin::hw
