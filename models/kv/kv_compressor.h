#pragma once
// KV-cache compressors as size models: how many bytes a sequence's K and V take on one GPU under
// each method. The hardware kernels of the same name must produce exactly these byte counts (a
// test compares them), and the serving simulator asks the same object how a batch grows.
//
// Conventions shared by all methods: per layer and KV head, K and V vectors of head_dim elements;
// quantisation constants (scale and zero point) are fp16; token counts are per sequence.
#include <cstdint>
#include <memory>
#include <string>

#include "models/scenario.h"
#include "models/units.h"

namespace memtwin {

/// The KV layout one GPU holds: its layers (pipeline stage) and KV heads (tensor rank).
struct KvShape {
  int layers = 0;
  int kv_heads = 0;
  int head_dim = 0;
  double element_bytes = 2;  ///< bytes per uncompressed element (bf16/fp16: 2, fp8: 1)
  /// The paged cache's block (tokens), where a method keeps different numbers of tokens per layer
  /// and each layer's cache is rounded up to whole blocks; 0: count tokens, not blocks.
  int block_size = 0;
  /// Bytes of one uncompressed token: 2 (K and V) x layers x kv_heads x head_dim x element_bytes.
  [[nodiscard]] double token_bytes() const { return 2.0 * layers * kv_heads * head_dim * element_bytes; }
};

class KvCompressor {
 public:
  virtual ~KvCompressor() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  /// Bytes the sequence holds after `prompt` prompt tokens and `generated` generated ones,
  /// including quantisation constants, full-precision windows and score buffers.
  [[nodiscard]] virtual double sequence_bytes(std::int64_t prompt, std::int64_t generated) const = 0;
  /// Bytes needed while the prompt is prefilled (methods that select after prefill need it whole).
  [[nodiscard]] virtual double prefill_bytes(std::int64_t prompt) const { return sequence_bytes(prompt, 0); }
  /// Tokens whose K/V stay cached (eviction methods keep fewer than they saw).
  [[nodiscard]] virtual std::int64_t kept_tokens(std::int64_t prompt, std::int64_t generated) const {
    return prompt + generated;
  }
  /// Of the kept tokens, those a quantising method holds in full precision (KIVI's residual): a
  /// decode kernel reads them as fp16, not from quantised groups.
  [[nodiscard]] virtual std::int64_t residual_tokens(std::int64_t /*prompt*/, std::int64_t /*generated*/) const { return 0; }
  /// Bytes per cached token in steady state: the unit of paged-block capacity.
  [[nodiscard]] virtual double bytes_per_stored_token() const = 0;
  /// Bytes per token of a method that keeps every token, all alike: then sequence_bytes(p, g) is
  /// exactly (p + g) x this (as a double product), prefill_bytes(p) is sequence_bytes(p, 0),
  /// kept_tokens(p, g) is p + g and residual_tokens is 0. 0 for every other method. Callers that
  /// ask per sequence and step (the batch scheduler) ask this once and skip the virtual calls.
  [[nodiscard]] virtual double uniform_token_bytes() const { return 0; }
  /// Tokens one layer keeps (methods whose layers keep different numbers override it).
  [[nodiscard]] virtual std::int64_t kept_tokens_in_layer(std::int64_t prompt, std::int64_t generated, int /*layer*/) const {
    return kept_tokens(prompt, generated);
  }
};

/// The compressor the scenario names, for this GPU's share of the cache (its method's descriptor makes it).
std::unique_ptr<KvCompressor> make_kv_compressor(const CompressionSpec& spec, const KvShape& shape);

}  // namespace memtwin
