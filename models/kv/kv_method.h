#pragma once
// KV-cache methods, one descriptor each (models/kv/kv_<method>.cpp), listed in one explicit
// registry (kv_registry.cpp). A descriptor is the one place that says what a method is:
//  * the scenario parameters it reads (its schema entries; the loader refuses any other one given
//    with the method, applies the defaults and lets the method check how its values combine);
//  * its size model (a KvCompressor for one GPU's share of the cache);
//  * how it stores the tokens it keeps and which tokens it keeps: the capabilities the cost model,
//    the batch scheduler and the hardware engine ask about instead of naming methods;
//  * the kernel formats its caches are read and written in (what `memtwin calibrate` measures).
// Adding a method is a descriptor file here, its entry in the registry, and its kernels.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/kv/kv_compressor.h"
#include "models/kv/kv_method_id.h"
#include "models/scenario.h"
#include "models/schema.h"

namespace memtwin {

class ParamValues;

/// How a method stores each token it keeps.
enum class KvStorage {
  vectors,             ///< K and V as written: kv_cache.dtype (16-bit or fp8)
  token_groups,        ///< asymmetric integer groups along channels, per token (int8/int4/int2)
  channel_key_groups,  ///< keys grouped per channel along tokens, values per token, a 16-bit residual (KIVI)
};

/// Which tokens a method keeps.
enum class KvSelection {
  all,                 ///< every token
  sinks_and_window,    ///< the first tokens and a ring of the most recent (StreamingLLM)
  accumulated_scores,  ///< heavy hitters by attention accumulated over every query, and recent tokens (H2O)
  prompt_vote,         ///< after prefill, the prompt tokens an observation window's queries vote for (SnapKV family)
};

/// One parameter of a method: the scenario key inference.kv_cache.compression.<key>.
struct KvParameter {
  std::string key;
  ValueKind kind = ValueKind::integer;
  std::string meaning;                       ///< one line: what the method does with it
  std::optional<std::string> default_value;  ///< written as a user would write it
  /// Whether the default is the schema's (the same for every method that reads the key, echoed in
  /// the resolved scenario) or this method's own (the schema shows it as derived from the method).
  bool default_in_schema = true;
  std::optional<double> min, max;
  bool min_exclusive = false;
};

/// A cache layout a decode-attention or cache-write kernel runs on (cluster.kernels.*.<name>).
struct KvKernelFormat {
  std::string name;
  std::string cache;          ///< the cache it reads, for the schema's description
  bool write_kernel = true;   ///< a cache-write kernel of its own (KIVI's residual has none)
};

class KvParameterReader;

/// One setting of a method that `memtwin quality` measures by default: how it is labelled and
/// its keys under inference.kv_cache, as --set writes them (e.g. "compression.bits=4").
struct KvQualityVariant {
  std::string label;
  std::vector<std::string> settings;
};

struct KvMethod {
  KvCompression id = KvCompression::none;
  std::string summary;  ///< what the method keeps and how, with its source
  std::vector<KvParameter> parameters;
  KvStorage storage = KvStorage::vectors;
  KvSelection selection = KvSelection::all;
  bool per_layer_budgets = false;  ///< layers keep different numbers of tokens: a block table per layer
  /// Empty when the hardware engine runs the method; else why it is simulated only.
  std::string simulated_only_because;
  /// Kernel formats of its own (the vectors' fp16 and fp8 belong to the method `none`).
  std::vector<KvKernelFormat> kernel_formats;
  /// Reads the parameters into `spec` (bits, windows, budgets) and checks how they combine.
  void (*read)(const KvParameterReader& reader, CompressionSpec& spec) = nullptr;
  /// The size model for `shape`, one GPU's share of the cache.
  std::unique_ptr<KvCompressor> (*make)(const CompressionSpec& spec, const KvShape& shape) = nullptr;
  /// What `memtwin quality` measures of it by default, for prompts of `prompt` tokens: a method
  /// that keeps fewer tokens keeps `budget` of the prompt's (a share); one that keeps every token
  /// ignores it. Null for a method the serving engine does not run.
  std::vector<KvQualityVariant> (*quality_variants)(int prompt, double budget) = nullptr;

  [[nodiscard]] std::string_view name() const { return kKvCompressionNames.name(id); }
  [[nodiscard]] bool quantizes() const { return storage != KvStorage::vectors; }
  /// Whether the cache is smaller than its tokens in kv_cache.dtype: stored in fewer bits or fewer tokens kept.
  [[nodiscard]] bool compresses() const { return quantizes() || selection != KvSelection::all; }
  [[nodiscard]] bool runs_on_devices() const { return simulated_only_because.empty(); }
  /// Whether the engine keeps per-token attention scores (H2O) or scores the prompt to select
  /// (SnapKV family): the work of attention-probability and eviction kernels.
  [[nodiscard]] bool scores_tokens() const {
    return selection == KvSelection::accumulated_scores || selection == KvSelection::prompt_vote;
  }
  /// Whether sequences can share a cached prefix's blocks: blocks hold whole tokens in the same form
  /// for every sequence (not a per-sequence selection or a residual window).
  [[nodiscard]] bool shares_prefix_blocks() const {
    return selection == KvSelection::all && storage != KvStorage::channel_key_groups;
  }
};

/// Reads a method's parameters from a scenario: a given value, else the schema's default, else the
/// method's own; `fail` reports at the key's place in the scenario.
class KvParameterReader {
 public:
  KvParameterReader(const ParamValues& values, const KvMethod& method) : values_(values), method_(method) {}
  [[nodiscard]] int integer(const std::string& key) const;
  [[nodiscard]] double number(const std::string& key) const;
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;

 private:
  const KvParameter& parameter(const std::string& key) const;
  const ParamValues& values_;
  const KvMethod& method_;
};

/// Every method, in the registry's order.
const std::vector<const KvMethod*>& kv_methods();
/// The names of the methods that select tokens this way, comma-separated, for documentation.
std::string kv_method_names(KvSelection selection);
const KvMethod& kv_method(KvCompression id);

/// The schema entries of inference.kv_cache.compression's parameters: each key once, documented
/// with the methods that read it.
std::vector<ParamSpec> kv_compression_schema();
/// inference.kv_cache.compression from a scenario's values.
CompressionSpec read_kv_compression(const ParamValues& values);

/// Every kernel format, vectors first, then token groups, then channel-key groups.
const std::vector<KvKernelFormat>& kv_kernel_formats();
/// The format decode attention reads this cache in (cluster.kernels.decode_attention.<format>).
std::string decode_kernel_format(const KvCacheSpec& kv);
/// The format of the part a method keeps in 16-bit vectors beside its groups (KIVI's residual); empty if none.
std::string residual_kernel_format(const KvCacheSpec& kv);

/// Whether sequences can share a cached prefix's blocks under this method.
inline bool shares_prefix_blocks(KvCompression method) { return kv_method(method).shares_prefix_blocks(); }

/// The compression a memory hint suggests for an uncompressed cache, and how a user writes it.
struct KvSuggestion {
  CompressionSpec spec;
  std::string written;  ///< e.g. inference.kv_cache.compression={method: ..., bits: ...}
};
KvSuggestion kv_compression_to_suggest();

}  // namespace memtwin
