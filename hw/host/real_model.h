#pragma once
// A real Llama-architecture model on the host: its weights as scripts/real_model/convert_gguf.py
// writes them (DIR/model.json with the architecture and a tensor index, DIR/weights.f32), and its
// forward pass built on the project's own KV kernels: each layer's K and V go into a paged cache
// through kernels::write_paged, attention reads it through kernels::decode_attention (every
// position as its own query against the cache up to itself), the projections are OpenBLAS GEMMs.
// What memtwin measures a KV format's cost in quality with; the reference it is held to is
// llama.cpp running the same GGUF file (tests/unit/test_real_model.cpp).
//
// The model: RMSNorm with learned weights before attention and MLP and at the end, rotary
// position embedding in rotate-half form with the model's theta, grouped-query attention, SwiGLU
// MLP, the output head tied to the token embeddings where the file has no output matrix.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/kv_format.h"

namespace memtwin::hw {

struct RealModelConfig {
  std::string name;
  int layers = 0, hidden = 0, intermediate = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0;
  double rope_theta = 10000, rms_norm_eps = 1e-5;
  bool tied_embeddings = false;
  std::string source_sha256;  ///< the GGUF file it was converted from
};

class RealModel {
 public:
  /// Reads DIR/model.json and DIR/weights.f32. Throws ScenarioError naming the file and key when
  /// a field is missing or wrong, or a tensor is absent, misshapen or beyond weights.f32.
  static RealModel load(const std::filesystem::path& dir);

  [[nodiscard]] const RealModelConfig& config() const { return config_; }

  /// The next-token logits after each prefix of `tokens`: row t (vocab floats) follows
  /// tokens[0..t]. The KV cache holds K and V in `format` (format.head_dim must be the model's).
  /// Where `attention_seconds` is given, the wall time of the decode-attention kernel calls (every
  /// layer) is added to it. Throws std::invalid_argument for a token id outside the vocabulary.
  [[nodiscard]] std::vector<float> logits(const std::vector<int>& tokens, kernels::KvFormat format,
                                          double* attention_seconds = nullptr) const;

 private:
  struct Layer {
    const float *attn_norm, *q, *k, *v, *o, *ffn_norm, *gate, *up, *down;
  };
  RealModelConfig config_;
  std::vector<float> weights_;
  const float* embeddings_ = nullptr;  ///< [vocab, hidden]
  const float* output_norm_ = nullptr;
  const float* output_ = nullptr;      ///< [vocab, hidden]: the embeddings when tied
  std::vector<Layer> layers_;
};

}  // namespace memtwin::hw
