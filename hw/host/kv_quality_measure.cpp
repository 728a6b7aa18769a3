#include "hw/host/kv_quality_measure.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "hw/host/host_kernels.h"
#include "hw/host/host_serving_kernels.h"
#include "models/backend.h"
#include "models/memory/serving_memory.h"

namespace memtwin::hw {

namespace {

// The texts' tokens to the engine, and each scored position's logits back.
class TextStream final : public TokenStream {
 public:
  TextStream(std::vector<QualityText> texts, int vocab) : texts_(std::move(texts)), vocab_(vocab), logits_(texts_.size()) {
    for (std::size_t i = 0; i < texts_.size(); ++i) {
      logits_[i].assign((texts_[i].tokens.size() - static_cast<std::size_t>(texts_[i].prompt)) * static_cast<std::size_t>(vocab), 0.0f);
    }
  }
  [[nodiscard]] int token(std::size_t record, int position) const override {
    return texts_.at(record).tokens.at(static_cast<std::size_t>(position));
  }
  void logits(std::size_t record, int position, const float* row) override {
    QualityText& t = texts_.at(record);
    const int scored = position + 1 - t.prompt;  // the row predicts token position + 1
    if (scored < 0 || static_cast<std::size_t>(position + 1) >= t.tokens.size()) {
      throw std::logic_error("the engine produced logits after position " + std::to_string(position) + " of a text of " +
                             std::to_string(t.tokens.size()) + " tokens, prompt " + std::to_string(t.prompt));
    }
    std::copy_n(row, vocab_, logits_[record].begin() + static_cast<std::ptrdiff_t>(scored) * vocab_);
    // Greedy: the next token fed is this row's most likely one.
    if (t.generate) t.tokens[static_cast<std::size_t>(position + 1)] = static_cast<int>(std::max_element(row, row + vocab_) - row);
  }
  std::vector<std::vector<float>> take_logits() { return std::move(logits_); }
  std::vector<std::vector<int>> take_tokens() {
    std::vector<std::vector<int>> out;
    for (QualityText& t : texts_) out.push_back(std::move(t.tokens));
    return out;
  }

 private:
  std::vector<QualityText> texts_;
  int vocab_;
  std::vector<std::vector<float>> logits_;
};

// log softmax of a row, in double.
std::vector<double> log_probabilities(const float* row, int n) {
  const float peak = *std::max_element(row, row + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(row[i]) - peak);
  const double log_sum = peak + std::log(sum);
  std::vector<double> out(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = row[i] - log_sum;
  return out;
}

int argmax(const float* row, int n) { return static_cast<int>(std::max_element(row, row + n) - row); }

}  // namespace

QualityText retrieval_probe(const BpeTokenizer& tokenizer, const std::vector<int>& filler, int prompt, int index) {
  // Five digits from a fixed linear congruential sequence (the digits are tokens of their own).
  const std::uint64_t x = (static_cast<std::uint64_t>(index) + 1) * 6364136223846793005ULL + 1442695040888963407ULL;
  const std::string code = std::to_string(10000 + (x >> 33) % 90000);
  QualityText t;
  t.probe = true;
  t.tokens = tokenizer.encode("Remember this: the pass code is " + code + ".\n\n");
  const std::vector<int> question = tokenizer.encode("\n\nWhat is the pass code? The pass code is");
  const long room = static_cast<long>(prompt) - static_cast<long>(t.tokens.size() + question.size());
  if (room < 0 || static_cast<long>(filler.size()) < room) {
    throw std::invalid_argument("a retrieval probe of " + std::to_string(prompt) + " tokens needs at least " +
                                std::to_string(t.tokens.size() + question.size()) + " and filler to fill it");
  }
  t.tokens.insert(t.tokens.end(), filler.begin(), filler.begin() + room);
  t.tokens.insert(t.tokens.end(), question.begin(), question.end());
  t.prompt = static_cast<int>(t.tokens.size());
  const std::vector<int> answer = tokenizer.encode(" " + code);
  t.tokens.insert(t.tokens.end(), answer.begin(), answer.end());
  return t;
}

RealModelRunResult run_real_model(const Scenario& s, const RealModel& model, const std::vector<QualityText>& texts) {
  const auto started = std::chrono::steady_clock::now();
  const RealModelConfig& c = model.config();
  const ModelSpec& m = s.model;
  if (m.layers != c.layers || m.hidden != c.hidden || m.heads != c.heads || m.kv_heads != c.kv_heads || m.head_dim != c.head_dim ||
      m.intermediate != c.intermediate || m.vocab != c.vocab) {
    throw Unsupported("the scenario's model is not " + c.name + "'s shape (layers " + std::to_string(c.layers) + ", hidden " +
                      std::to_string(c.hidden) + ", heads " + std::to_string(c.heads) + ", kv_heads " + std::to_string(c.kv_heads) +
                      ", intermediate " + std::to_string(c.intermediate) + ", vocab " + std::to_string(c.vocab) +
                      "): scenarios/quality/smollm2-135m.yaml has it");
  }
  const auto& serving = s.inference->serving;
  std::vector<Request> requests;
  std::int64_t prompts = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const QualityText& t = texts[i];
    if (t.prompt < 1 || static_cast<std::size_t>(t.prompt) >= t.tokens.size()) {
      throw std::invalid_argument("a text to run needs a prompt and at least one token after it");
    }
    if (static_cast<int>(t.tokens.size()) > serving.max_model_len) {
      throw Unsupported("a text of " + std::to_string(t.tokens.size()) + " tokens exceeds inference.serving.max_model_len " +
                        std::to_string(serving.max_model_len));
    }
    Request r;
    r.id = static_cast<std::int64_t>(i);
    r.prompt_tokens = t.prompt;
    r.output_tokens = static_cast<int>(t.tokens.size()) - t.prompt;
    requests.push_back(r);
    prompts += t.prompt;
  }
  // Every prompt in one iteration, whole (a real model's prefill attention takes whole prompts).
  if (prompts > serving.max_num_batched_tokens || static_cast<int>(texts.size()) > serving.max_num_seqs) {
    throw Unsupported("the texts' " + std::to_string(texts.size()) + " prompts (" + std::to_string(prompts) +
                      " tokens) must run as one batch: raise inference.serving.max_num_seqs and max_num_batched_tokens");
  }
  const ServingMemory memory = serving_memory(s);
  if (!memory.fits) throw Unsupported("the quality scenario does not fit in memory: " + memory.why_not);

  // The host device as `memtwin run --device host` has it: one core (OpenBLAS's threads and the
  // kernels' OpenMP ones otherwise contend for the same cores, and a decode step's time with them).
  use_one_core();
  ServingDevice device;
  device.kernels = std::make_unique<HostServingKernels>();
  device.memory = host_memory();
  device.description = "the host device";
  TextStream stream(texts, c.vocab);
  RealModelRun real;
  real.weights = &model.weights();
  real.requests = requests;
  real.tokens = &stream;
  RealModelRunResult out;
  out.measurement = serve_on_device(s, device, nullptr, &real);
  if (out.measurement.oom) throw std::runtime_error("the real model's run ran out of memory: " + std::string(out.measurement.oom->what()));
  out.logits = stream.take_logits();
  out.tokens = stream.take_tokens();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

std::vector<KvQualityMeasure> measure_kv_quality(const RealModel& model, const std::vector<Scenario>& candidates,
                                                 const Scenario& reference, const std::vector<QualityText>& texts) {
  const int vocab = model.config().vocab;
  auto corpus = [](const QualityText& t) { return !t.probe && !t.generate; };
  if (std::none_of(texts.begin(), texts.end(), corpus)) {
    throw std::invalid_argument("quality needs at least one corpus text (not a retrieval probe, not generated)");
  }
  // Position by position, the generated tokens that are the reference's.
  auto generation_agreement = [&](const RealModelRunResult& run, const RealModelRunResult& reference_run) {
    std::size_t same = 0, generated = 0;
    for (std::size_t i = 0; i < texts.size(); ++i) {
      if (!texts[i].generate) continue;
      for (std::size_t k = static_cast<std::size_t>(texts[i].prompt); k < texts[i].tokens.size(); ++k, ++generated) {
        same += run.tokens[i][k] == reference_run.tokens[i][k] ? 1 : 0;
      }
    }
    return generated == 0 ? -1.0 : static_cast<double>(same) / static_cast<double>(generated);
  };
  // A probe is answered when every answer token is the most likely one.
  auto retrieval = [&](const RealModelRunResult& run) {
    int probes = 0, answered = 0;
    for (std::size_t i = 0; i < texts.size(); ++i) {
      if (!texts[i].probe) continue;
      ++probes;
      bool all = true;
      for (std::size_t k = 0; k + static_cast<std::size_t>(texts[i].prompt) < texts[i].tokens.size(); ++k) {
        all = all && argmax(run.logits[i].data() + k * static_cast<std::size_t>(vocab), vocab) ==
                         texts[i].tokens[static_cast<std::size_t>(texts[i].prompt) + k];
      }
      answered += all ? 1 : 0;
    }
    return probes == 0 ? -1.0 : static_cast<double>(answered) / probes;
  };
  auto tpot = [](const ServingRun& run) {
    double sum = 0;
    int n = 0;
    for (const RequestRecord& r : run.requests) {
      if (r.output_tokens < 2 || r.finish_s < 0) continue;
      sum += (r.finish_s - r.first_token_s) / (r.output_tokens - 1);
      ++n;
    }
    return n == 0 ? 0.0 : sum / n;
  };

  const RealModelRunResult base = run_real_model(reference, model, texts);
  std::vector<std::vector<std::vector<double>>> base_log_probs(texts.size());  // [text][scored][vocab]
  double base_nll = 0;
  std::size_t positions = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    if (!corpus(texts[i])) continue;
    for (std::size_t k = 0; k + static_cast<std::size_t>(texts[i].prompt) < texts[i].tokens.size(); ++k) {
      base_log_probs[i].push_back(log_probabilities(base.logits[i].data() + k * static_cast<std::size_t>(vocab), vocab));
      base_nll -= base_log_probs[i].back()[static_cast<std::size_t>(texts[i].tokens[static_cast<std::size_t>(texts[i].prompt) + k])];
      ++positions;
    }
  }
  const auto n = static_cast<double>(positions);
  std::vector<KvQualityMeasure> out;
  for (const Scenario& candidate : candidates) {
    const RealModelRunResult run = run_real_model(candidate, model, texts);
    double nll = 0, kl = 0;
    std::size_t agree = 0;
    for (std::size_t i = 0; i < texts.size(); ++i) {
      if (!corpus(texts[i])) continue;
      for (std::size_t k = 0; k < base_log_probs[i].size(); ++k) {
        const float* row = run.logits[i].data() + k * static_cast<std::size_t>(vocab);
        const std::vector<double> p = log_probabilities(row, vocab);
        const std::vector<double>& q = base_log_probs[i][k];
        nll -= p[static_cast<std::size_t>(texts[i].tokens[static_cast<std::size_t>(texts[i].prompt) + k])];
        for (std::size_t v = 0; v < p.size(); ++v) kl += std::exp(q[v]) * (q[v] - p[v]);
        agree += argmax(row, vocab) == argmax(base.logits[i].data() + k * static_cast<std::size_t>(vocab), vocab) ? 1 : 0;
      }
    }
    KvQualityMeasure q;
    q.positions = positions;
    q.perplexity = std::exp(nll / n);
    q.reference_perplexity = std::exp(base_nll / n);
    q.perplexity_delta = q.perplexity - q.reference_perplexity;
    q.kl = kl / n;
    q.token_agreement = static_cast<double>(agree) / n;
    q.retrieval = retrieval(run);
    q.reference_retrieval = retrieval(base);
    q.generation_agreement = generation_agreement(run, base);
    q.tpot_s = tpot(run.measurement.run);
    q.seconds = run.seconds;
    out.push_back(q);
  }
  return out;
}

}  // namespace memtwin::hw
