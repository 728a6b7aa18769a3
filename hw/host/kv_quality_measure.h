#pragma once
// What a KV-cache format costs in quality, measured on the real model (hw/host/real_model.h): the
// same texts run with the cache in the format and in a reference format (fp16), position by
// position, teacher-forced (each position sees the text's own tokens before it).
#include <cstddef>
#include <vector>

#include "hw/host/real_model.h"

namespace memtwin::hw {

struct KvQualityMeasure {
  double perplexity = 0;            ///< exp of the mean negative log-likelihood of each next token
  double reference_perplexity = 0;  ///< the same with the reference format's cache
  double perplexity_delta = 0;      ///< perplexity - reference_perplexity
  double kl = 0;               ///< mean KL(reference || format) of the next-token distributions, in nats
  double token_agreement = 0;  ///< share of positions whose most likely next token is the reference's
  std::size_t positions = 0;   ///< positions predicted (each text's tokens after its first)
  /// Wall time of decode attention (every layer) per position with the format's cache: each
  /// position attends to the cache up to itself, as a decode step of that context does. Measured,
  /// so it varies from run to run.
  double attention_s_per_token = 0;
};

/// Measures each of `formats` against `reference` over `texts` (token ids, each at least two
/// tokens; the reference runs once per text). Throws std::invalid_argument for a shorter text.
std::vector<KvQualityMeasure> measure_kv_quality(const RealModel& model, const std::vector<std::vector<int>>& texts,
                                                 const std::vector<kernels::KvFormat>& formats,
                                                 const kernels::KvFormat& reference);

}  // namespace memtwin::hw
