#pragma once
// What a KV method costs in quality, measured by the serving engine (hw/serving_engine.h) running
// a real model (hw/host/real_model.h) on the host device: every text is a request whose prompt is
// prefilled and whose continuation is fed back token by token (teacher-forced: each step sees the
// text's own tokens), with the cache in the scenario's method — its format, its kernels, the tokens
// it keeps — exactly as a served request's. Each step's next-token distribution is compared with
// the same run's under a reference scenario (the uncompressed fp16 cache).
#include <cstddef>
#include <vector>

#include "hw/host/bpe_tokenizer.h"
#include "hw/host/real_model.h"
#include "hw/serving_engine.h"
#include "models/scenario.h"

namespace memtwin::hw {

/// A text to run: its first `prompt` tokens are the prompt; each later token is scored (its
/// probability after the tokens before it) and then fed. A retrieval probe's scored tokens are its
/// answer, counted only whole.
struct QualityText {
  std::vector<int> tokens;
  int prompt = 0;
  bool probe = false;
  /// Generated greedily instead: each token after the prompt is the most likely one after the
  /// tokens before it (what `tokens` holds there is replaced), and compared with the reference's.
  bool generate = false;
};

/// A long-context retrieval probe of `prompt` tokens: a five-digit pass code stated at the start,
/// `filler` tokens (cut to fit), then the question; the answer (" " and the code) follows. The
/// code is the `index`-th of a fixed sequence, so probes are the same on every run.
QualityText retrieval_probe(const BpeTokenizer& tokenizer, const std::vector<int>& filler, int prompt, int index);

/// One scenario's run over the texts: per text, the logits (vocab floats each) that predict its
/// tokens prompt .. size-1, and what the engine measured.
struct RealModelRunResult {
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<int>> tokens;  ///< per text, its tokens as run (generated ones filled in)
  ServingMeasurement measurement;
  double seconds = 0;  ///< wall time of the run, set-up included
};

/// Runs the texts as requests (all arriving at once) on the host serving engine with the real
/// model. The scenario's model must have the real model's shape, its batch limits must take every
/// text at once (max_num_seqs, max_num_batched_tokens, max_model_len) and it must fit in memory;
/// throws Unsupported naming the setting otherwise, std::invalid_argument for a text without a
/// token after its prompt.
RealModelRunResult run_real_model(const Scenario& scenario, const RealModel& model, const std::vector<QualityText>& texts);

struct KvQualityMeasure {
  double perplexity = 0;            ///< exp of the mean negative log-likelihood of the scored tokens
  double reference_perplexity = 0;  ///< the same under the reference scenario
  double perplexity_delta = 0;      ///< perplexity - reference_perplexity
  double kl = 0;               ///< mean KL(reference || method) of the next-token distributions, in nats
  double token_agreement = 0;  ///< share of scored positions whose most likely token is the reference's
  double retrieval = -1;       ///< share of probes answered (every answer token the most likely); -1 without probes
  /// Share of the greedily generated tokens that are the reference's at the same position; -1
  /// without generating texts.
  double generation_agreement = -1;
  double reference_retrieval = -1;
  std::size_t positions = 0;   ///< scored positions of the corpus texts (not probes, not generated)
  /// The run's mean time per output token (the requests decode as one batch): measured, so it
  /// varies from run to run.
  double tpot_s = 0;
  double seconds = 0;  ///< the run's wall time
};

/// Each candidate scenario's quality against the reference scenario's, over the same texts (at
/// least one that is not a probe).
std::vector<KvQualityMeasure> measure_kv_quality(const RealModel& model, const std::vector<Scenario>& candidates,
                                                 const Scenario& reference, const std::vector<QualityText>& texts);

}  // namespace memtwin::hw
