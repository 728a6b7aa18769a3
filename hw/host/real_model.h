#pragma once
// A real Llama-architecture model on the host: its weights as scripts/real_model/convert_gguf.py
// writes them (DIR/model.json with the architecture and a tensor index, DIR/weights.f32), read
// and checked, and handed to the serving engine as RealWeights (hw/real_weights.h): the engine's
// forward pass runs it (hw/device_model.h), with every KV method it runs. What memtwin measures a
// KV method's cost in quality with (hw/host/kv_quality_measure.h); the reference the engine is
// held to on it is llama.cpp running the same GGUF file (tests/unit/test_real_model.cpp).
//
// The model: RMSNorm with learned weights before attention and MLP and at the end, rotary
// position embedding in rotate-half form with the model's theta, grouped-query attention, SwiGLU
// MLP, the output head tied to the token embeddings where the file has no output matrix.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "hw/real_weights.h"

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
  RealModel(RealModel&&) = default;  // weights() points into the moved buffer, which stays where it is
  RealModel& operator=(RealModel&&) = default;
  RealModel(const RealModel&) = delete;
  RealModel& operator=(const RealModel&) = delete;

  [[nodiscard]] const RealModelConfig& config() const { return config_; }
  /// The weights as the serving engine takes them (pointing into this object).
  [[nodiscard]] const RealWeights& weights() const { return real_; }

 private:
  RealModel() = default;
  RealModelConfig config_;
  std::vector<float> weights_;
  RealWeights real_;  ///< pointers into weights_
};

}  // namespace memtwin::hw
