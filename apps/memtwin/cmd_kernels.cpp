// memtwin kernels: what each KV format loses and saves, measured with the kernels themselves.
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "apps/memtwin/commands.h"
#include "apps/memtwin/kv_files.h"
#include "apps/memtwin/options.h"
#include "kernels/kv_quality.h"
#include "models/kv/kv_methods.h"

namespace po = boost::program_options;

namespace memtwin::cli {

int cmd_kernels(const Args& args) {
  po::options_description options("options");
  options.add_options()
      ("tokens", po::value<int>()->default_value(4096), "context length of the synthetic KV")
      ("kv-heads", po::value<int>()->default_value(8), "KV heads of the synthetic KV")
      ("q-heads", po::value<int>()->default_value(32), "query heads (GQA) for the attention checks")
      ("head-dim", po::value<int>()->default_value(128), "head size: 64, 128 or 256")
      ("group", po::value<int>()->default_value(32), "quantisation group along channels")
      ("topk", po::value<int>()->default_value(64), "k of the top-k attention overlap")
      ("keys", po::value<std::string>(),
       "K [tokens, kv_heads, head_dim]: a .npy file (float32/float16) or FILE.safetensors[:TENSOR] (F32/F16/BF16)")
      ("values", po::value<std::string>(), "V of the same shape, the same way")
      ("seed", po::value<std::uint64_t>()->default_value(1), "seed of the synthetic KV and queries")
      ("json", po::bool_switch(), "print JSON");
  auto vm = parse_args(args, options, {},
                       "usage: memtwin kernels [--keys K.npy|KV.safetensors:K --values V.npy|KV.safetensors:V] [--tokens N] [--json]\n\n"
                       "Quantises KV with each format the kernels support and reports reconstruction error,\n"
                       "attention output error and top-k overlap against full precision, and the bytes per\n"
                       "token, checked against memtwin's size model. Synthetic KV has outlier key channels\n"
                       "(10-50x), as published KV-quantisation studies report (docs/kv-kernels.md).");
  if (!vm) return kOk;
  const std::uint64_t seed = (*vm)["seed"].as<std::uint64_t>();
  kernels::KvTensor keys, values;
  if (vm->count("keys") != vm->count("values")) throw UsageError("give both --keys and --values, or neither");
  if (vm->count("keys")) {
    try {
      keys = read_kv_file((*vm)["keys"].as<std::string>());
      values = read_kv_file((*vm)["values"].as<std::string>());
    } catch (const std::runtime_error& e) {
      throw UsageError(e.what());
    }
  } else {
    const int t = (*vm)["tokens"].as<int>(), h = (*vm)["kv-heads"].as<int>(), d = (*vm)["head-dim"].as<int>();
    if (t < 1 || h < 1) throw UsageError("--tokens and --kv-heads must be positive");
    keys = kernels::synthetic_keys(t, h, d, seed);
    values = kernels::synthetic_values(t, h, d, seed + 1);
  }
  const int q_heads = (*vm)["q-heads"].as<int>();
  if (keys.kv_heads < 1 || keys.tokens < 1 || keys.head_dim < 1) {
    throw UsageError("the keys have " + std::to_string(keys.tokens) + " tokens, " + std::to_string(keys.kv_heads) +
                     " KV heads and head_dim " + std::to_string(keys.head_dim) + ": each must be at least 1");
  }
  if (q_heads < 1 || q_heads % keys.kv_heads != 0) throw UsageError("--q-heads must be a positive multiple of the KV heads");
  if (values.tokens != keys.tokens || values.kv_heads != keys.kv_heads || values.head_dim != keys.head_dim) {
    throw UsageError("the values' shape [" + std::to_string(values.tokens) + ", " + std::to_string(values.kv_heads) + ", " +
                     std::to_string(values.head_dim) + "] differs from the keys' [" + std::to_string(keys.tokens) + ", " +
                     std::to_string(keys.kv_heads) + ", " + std::to_string(keys.head_dim) + "]");
  }
  const int topk = (*vm)["topk"].as<int>();
  if (topk < 1) throw UsageError("--topk must be at least 1 (got " + std::to_string(topk) + ")");

  nlohmann::ordered_json doc;
  doc["schema"] = "memtwin.kernels_quality/1";
  doc["tokens"] = keys.tokens;
  doc["kv_heads"] = keys.kv_heads;
  doc["head_dim"] = keys.head_dim;
  doc["source"] = !vm->count("keys")                                                            ? "synthetic"
                  : (*vm)["keys"].as<std::string>().find(".safetensors") != std::string::npos ? "safetensors"
                                                                                               : "npy";
  const KvShape one_layer{1, keys.kv_heads, keys.head_dim, 2};
  bool sizes_agree = true;
  const double fp16_bytes = 2.0 * keys.kv_heads * keys.head_dim * 2;
  for (auto e : {kernels::KvElement::fp16, kernels::KvElement::fp8, kernels::KvElement::int8, kernels::KvElement::int4,
                 kernels::KvElement::int2}) {
    kernels::KvFormat f;
    f.element = e;
    f.head_dim = keys.head_dim;
    f.group = (*vm)["group"].as<int>();
    try {
      f.validate();
    } catch (const std::invalid_argument& err) {
      throw UsageError(err.what());
    }
    const auto q = kernels::measure_quality(keys, values, f, q_heads, topk, seed + 2);
    const KvShape fp8_layer{1, keys.kv_heads, keys.head_dim, 1};
    double model_bytes = f.quantized()                           ? GroupQuantKv(one_layer, f.bits(), f.group, false, 0).bytes_per_stored_token()
                         : e == kernels::KvElement::fp8 ? FullPrecisionKv(fp8_layer).bytes_per_stored_token()
                                                        : FullPrecisionKv(one_layer).bytes_per_stored_token();
    sizes_agree = sizes_agree && model_bytes == q.bytes_per_token;
    nlohmann::ordered_json row;
    row["format"] = f.quantized() ? "int" + std::to_string(f.bits()) : e == kernels::KvElement::fp8 ? "fp8" : "fp16";
    row["bytes_per_token_per_layer"] = q.bytes_per_token;
    row["size_model_bytes"] = model_bytes;
    row["compression"] = fp16_bytes / q.bytes_per_token;
    row["key_error"] = q.key_error;
    row["value_error"] = q.value_error;
    row["attention_output_error"] = q.output_error;
    row["topk_overlap"] = q.topk_overlap;
    doc["formats"].push_back(row);
  }
  doc["size_model_agrees"] = sizes_agree;
  if ((*vm)["json"].as<bool>()) {
    std::cout << doc.dump(2) << "\n";
  } else {
    std::printf("KV quality on %s KV: %d tokens, %d KV heads, head_dim %d, %d query heads\n",
                doc["source"].get<std::string>().c_str(), keys.tokens, keys.kv_heads, keys.head_dim, q_heads);
    std::printf("%-6s %14s %11s %10s %10s %13s %12s\n", "format", "bytes/token/L", "compression", "K error", "V error",
                "output error", "top-k overlap");
    for (const auto& r : doc["formats"]) {
      std::printf("%-6s %14.0f %10.2fx %10.4f %10.4f %13.4f %12.3f\n", r["format"].get<std::string>().c_str(),
                  r["bytes_per_token_per_layer"].get<double>(), r["compression"].get<double>(), r["key_error"].get<double>(),
                  r["value_error"].get<double>(), r["attention_output_error"].get<double>(), r["topk_overlap"].get<double>());
    }
    std::printf("bytes agree with memtwin's size model: %s\n", sizes_agree ? "yes" : "NO");
  }
  return sizes_agree ? kOk : kInternalError;
}

}  // namespace memtwin::cli
