#pragma once
// The requests of a serving workload: arrival times and lengths drawn from the scenario's
// distributions with the scenario's seed (own samplers, so the stream is the same on every
// platform), or read from a trace CSV. Closed-loop workloads yield lengths only; the engine issues
// the next request when one completes.
#include <cstdint>
#include <string>
#include <vector>

#include "models/scenario.h"

namespace memtwin {

struct Request {
  std::int64_t id = 0;
  double arrival_s = 0;
  int prompt_tokens = 0;
  int output_tokens = 0;
  int prefix_group = -1;  ///< shared-prefix group, -1 for none
  int prefix_tokens = 0;  ///< leading prompt tokens the group shares
  int trace_row = 0;      ///< the trace's line it came from (0: drawn, not read)
};

/// A deterministic 64-bit generator (SplitMix64) with the samplers the workload needs.
class Sampler {
 public:
  explicit Sampler(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next();
  double uniform();                  ///< [0, 1)
  double exponential(double mean);
  double normal(double mean, double std);
  double gamma(double shape, double scale);  ///< Marsaglia-Tsang

 private:
  std::uint64_t state_;
};

/// All requests of an open-loop workload, or `count` requests with arrival 0 for closed loop.
/// Lengths are clamped to [1, max_model_len - 1] prompt and at least 1 output token. With shared
/// prefixes, each request joins one of the groups uniformly at random and its prompt is the
/// group's prefix followed by its own drawn prompt (drawn from a stream of its own, so the other
/// draws do not change).
std::vector<Request> generate_requests(const Inference& inference, std::uint64_t seed);

/// A trace's requests against the engine's context (the serving rules vLLM's frontend applies):
/// a prompt of max_model_len tokens or more is refused (ScenarioError naming the trace's row, as
/// vLLM refuses the request); an output longer than the context leaves is cut to what it leaves,
/// as drawn workloads are (such a row was recorded on a longer-context deployment). Returns how
/// many outputs were cut.
int fit_trace_to_context(std::vector<Request>& requests, const std::string& trace, int max_model_len);

/// Replays a trace at `rate_per_s` requests per second on average: every arrival time scaled by the
/// trace's own mean rate ((requests - 1) / span) over `rate_per_s`, so its bursts keep their shape.
/// A trace whose arrivals all fall at one instant has no rate to scale (ScenarioError under
/// inference.workload.rate).
void scale_trace_to_rate(std::vector<Request>& requests, const std::string& trace, double rate_per_s);

/// Reads a trace (trace_reader.cpp; a UTF-8 byte-order mark allowed). A CSV: a header, then
/// `arrival_s` (or `timestamp`/`Timestamp`: seconds or "YYYY-MM-DD hh:mm:ss(.fff)", rebased to the
/// first), `prompt_tokens` (or `ContextTokens`, `Request tokens`), `output_tokens` (or
/// `GeneratedTokens`, `Response tokens`); cells may be quoted; each quantity in one column only.
/// JSON Lines: one object a request, `arrival_s` (or Mooncake's `timestamp`, milliseconds),
/// `prompt_tokens` (or `input_length`), `output_tokens` (or `output_length`), and Mooncake's
/// `hash_ids`, whose shared leading blocks become the request's shared prefix. Arrivals must be
/// finite, non-negative and in order; token counts whole numbers in 0..2^30 (0 counts as 1); at
/// most 10 M requests and at least one. Throws ScenarioError naming the file, row and column,
/// under inference.workload.trace.
std::vector<Request> read_trace(const std::string& path);

/// Reads an empirical length file: one positive finite number per line (blank lines allowed).
/// Throws ScenarioError naming the file, the line and `key` (the scenario key that names the file).
std::vector<double> read_lengths(const std::string& path, const std::string& key = "inference.workload.*_tokens.file");

/// Reads a file of (prompt, output) length pairs: a CSV whose header names the prompt column
/// (prompt_tokens, input_len, input_length, ContextTokens or "Request tokens") and the output
/// column (output_tokens, output_len, output_length, GeneratedTokens or "Response tokens"); other
/// columns (a trace's arrivals, say) are ignored. Lengths are whole numbers >= 1 (0 counts as 1,
/// as in traces). Throws ScenarioError naming the file, row and column, under
/// inference.workload.lengths.
struct LengthPair {
  int prompt = 1, output = 1;
};
std::vector<LengthPair> read_length_pairs(const std::string& path);

/// Opens and checks every file the workload refers to (its trace, against the engine's context;
/// its empirical length files), as a run would read them: what `memtwin check` adds to loading.
void check_workload_files(const Inference& inference);

}  // namespace memtwin
