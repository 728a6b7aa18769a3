#include "apps/memtwin/kv_files.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace memtwin::cli {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The whole numbers >= 0 listed under `key` (none when absent). A float, a negative number or one
// past 2^64 is refused: nlohmann's conversion of those to an integer is undefined behaviour.
std::vector<std::uint64_t> whole_numbers(const nlohmann::json& t, const char* key, const std::string& where) {
  const auto it = t.find(key);
  if (it == t.end()) return {};
  if (!it->is_array()) throw std::runtime_error(where + ": " + key + " is not a list");
  std::vector<std::uint64_t> out;
  for (const auto& v : *it) {
    if (v.is_number_unsigned()) {
      out.push_back(v.get<std::uint64_t>());
    } else if (v.is_number_integer() && v.get<std::int64_t>() >= 0) {
      out.push_back(static_cast<std::uint64_t>(v.get<std::int64_t>()));
    } else {
      throw std::runtime_error(where + ": " + key + " holds " + v.dump() + ", not a whole number >= 0");
    }
  }
  return out;
}

// safetensors: an 8-byte little-endian header length, a JSON header naming each tensor's dtype,
// shape and [begin, end) byte offsets into the data that follows.
kernels::KvTensor read_safetensors(const std::string& path, const std::string& wanted) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw std::runtime_error(path + ": cannot read (not a regular file)");
  const std::uintmax_t file_bytes = std::filesystem::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (!in || ec) throw std::runtime_error(path + ": cannot read");
  std::uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  if (!in || header_len == 0 || header_len > (100u << 20) || header_len > file_bytes - std::min<std::uintmax_t>(file_bytes, 8)) {
    throw std::runtime_error(path + ": not a safetensors file (header length)");
  }
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception&) {
    throw std::runtime_error(path + ": its safetensors header is not JSON");
  }
  std::string names;
  std::string chosen = wanted;
  int tensors = 0;
  for (const auto& [name, _] : meta.items()) {
    if (name == "__metadata__") continue;
    names += (names.empty() ? "" : ", ") + name;
    ++tensors;
    if (wanted.empty()) chosen = name;
  }
  if (wanted.empty() && tensors != 1) {
    throw std::runtime_error(path + ": holds " + std::to_string(tensors) + " tensors (" + names +
                             "); name one as " + path + ":NAME");
  }
  if (!meta.contains(chosen)) throw std::runtime_error(path + ": no tensor '" + chosen + "' (it holds " + names + ")");
  const auto& t = meta[chosen];
  std::string dtype;
  std::vector<std::uint64_t> dims, offsets;
  try {
    dtype = t.value("dtype", "");
    dims = whole_numbers(t, "shape", path + ":" + chosen);
    offsets = whole_numbers(t, "data_offsets", path + ":" + chosen);
  } catch (const nlohmann::json::exception&) {
    throw std::runtime_error(path + ":" + chosen + ": dtype, shape or data_offsets of the wrong type");
  }
  std::vector<long> shape;
  for (const std::uint64_t d : dims) {
    if (d > (std::uint64_t{1} << 62)) throw std::runtime_error(path + ":" + chosen + ": dimension " + std::to_string(d) + " is too large");
    shape.push_back(static_cast<long>(d));
  }
  if (shape.size() != 3 || offsets.size() != 2) {
    throw std::runtime_error(path + ":" + chosen + ": expected shape [tokens, kv_heads, head_dim]");
  }
  const std::size_t element = dtype == "F32" ? 4 : (dtype == "F16" || dtype == "BF16") ? 2 : 0;
  if (element == 0) throw std::runtime_error(path + ":" + chosen + ": dtype " + dtype + "; F32, F16 or BF16 are read");
  const std::uintmax_t data_bytes = file_bytes - 8 - header_len;
  const std::size_t n = kernels::checked_elements(shape, element, data_bytes, path + ":" + chosen);
  kernels::KvTensor out{static_cast<int>(shape[0]), static_cast<int>(shape[1]), static_cast<int>(shape[2]), {}};
  if (offsets[1] < offsets[0] || offsets[1] > data_bytes || offsets[1] - offsets[0] != n * element) {
    throw std::runtime_error(path + ":" + chosen + ": its data offsets do not match its shape and the file");
  }
  in.seekg(static_cast<std::streamoff>(8 + header_len + offsets[0]));
  std::vector<char> raw(n * element);
  in.read(raw.data(), static_cast<std::streamsize>(raw.size()));
  if (!in) throw std::runtime_error(path + ": the file is shorter than its header says");
  out.data.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (dtype == "F32") {
      std::memcpy(&out.data[i], &raw[4 * i], 4);
    } else {
      std::uint16_t h;
      std::memcpy(&h, &raw[2 * i], 2);
      if (dtype == "F16") {
        out.data[i] = kernels::half_to_float(h);
      } else {  // bfloat16: the top half of a float
        const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
        std::memcpy(&out.data[i], &bits, 4);
      }
    }
  }
  return out;
}

}  // namespace

kernels::KvTensor read_kv_file(const std::string& spec) {
  kernels::KvTensor t;
  const auto marker = spec.find(".safetensors");
  if (marker != std::string::npos) {
    const std::size_t end = marker + std::string(".safetensors").size();
    const std::string path = spec.substr(0, end);
    if (spec.size() > end && spec[end] != ':') {
      throw std::runtime_error(spec + ": give FILE.safetensors or FILE.safetensors:TENSOR");
    }
    std::string tensor = spec.size() > end ? spec.substr(end + 1) : "";
    t = read_safetensors(path, tensor);
  } else {
    if (!ends_with(spec, ".npy")) throw std::runtime_error(spec + ": give a .npy or .safetensors file");
    t = kernels::read_npy(spec);
  }
  // A NaN or an infinity would make every error NaN and every comparison false: a quality of 0
  // error and full top-k overlap would be reported for nonsense.
  const auto bad = std::find_if(t.data.begin(), t.data.end(), [](float x) { return !std::isfinite(x); });
  if (bad != t.data.end()) {
    throw std::runtime_error(spec + ": element " + std::to_string(bad - t.data.begin()) + " is not finite (" +
                             std::to_string(*bad) + ")");
  }
  return t;
}

}  // namespace memtwin::cli
