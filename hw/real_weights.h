#pragma once
// What the serving engine (hw/serving_engine.h) needs to run a real model instead of synthetic
// weights: the weights in host memory as a Llama-architecture checkpoint lays them out (the host's
// RealModel, hw/host/real_model.h, reads them), and where each sequence's token ids come from and
// its next-token logits go. With them the engine's forward pass embeds the tokens, applies the
// learned norms and the model's rotary base, computes prompt attention for real and hands every
// output row's logits back; everything else (scheduler, paged cache, KV methods) is the same run.
#include <cstdint>
#include <vector>

#include "models/serving/batch_scheduler.h"

namespace memtwin::hw {

struct RealWeights {
  double rope_theta = 10000, rms_norm_eps = 1e-5;
  /// Linear layers are [out, in] row-major, as the checkpoint stores them; norms are [hidden].
  struct Layer {
    const float *attn_norm = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
    const float *ffn_norm = nullptr, *gate = nullptr, *up = nullptr, *down = nullptr;
  };
  std::vector<Layer> layers;
  const float* embeddings = nullptr;   ///< [vocab, hidden]
  const float* output_norm = nullptr;  ///< [hidden]
  const float* output = nullptr;       ///< [vocab, hidden]: the embeddings where they are tied
};

/// A real-weights run's tokens and logits. Positions count from a sequence's first prompt token.
class TokenStream {
 public:
  virtual ~TokenStream() = default;
  /// The token id at `position` of the request `record` (ServingRun::requests' index): its prompt,
  /// then the tokens fed back while it decodes (teacher-forced: the caller decides which).
  [[nodiscard]] virtual int token(std::size_t record, int position) const = 0;
  /// The next-token logits (vocab floats, host memory, valid during the call) after `position`.
  virtual void logits(std::size_t record, int position, const float* row) = 0;
};

}  // namespace memtwin::hw
