#pragma once
// The scenario language's reference: every parameter declared once with its type, default, unit
// and one-line description. The loader rejects keys not declared here, converts values by their
// kind, and fills defaults from here; `memtwin schema` prints it and scenarios/SCHEMA.md is
// generated from it (a test keeps the committed copy in sync).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace memtwin {

enum class ValueKind {
  integer,      ///< a whole number (scientific notation allowed when integral: 1e4)
  number,       ///< a real number
  boolean,      ///< true | false
  text,         ///< free text
  choice,       ///< one of `choices`
  choice_list,  ///< a list of `choices` (a single value is a list of one)
  bytes,        ///< "80GiB", "30TB"
  bandwidth,    ///< "450GB/s", "400Gbps"
  duration,     ///< "2us", "1.5s"
  flops_rate,   ///< "989TFLOPS"
  rate,         ///< "10/s", "600/min"
  path,         ///< a file path, relative to the scenario file
  preset,       ///< a catalog name (checked against the catalog of its section)
};

std::string_view kind_name(ValueKind kind);

struct ParamSpec {
  std::string path;                          ///< dotted key path, e.g. "training.micro_batch"
  ValueKind kind = ValueKind::text;
  std::optional<std::string> default_value;  ///< written as a user would write it
  std::string default_note;                  ///< for defaults derived from other values
  std::string doc;                           ///< one line
  std::vector<std::string> choices;          ///< choice / choice_list
  std::optional<double> min;                 ///< numeric lower bound
  bool min_exclusive = false;
  std::optional<double> max;                 ///< numeric upper bound (inclusive)
};

/// All parameters, in document order.
const std::vector<ParamSpec>& schema_params();

/// The parameter at exactly this path, or nullptr.
const ParamSpec* find_param(std::string_view path);

/// True when `path` names a mapping that holds parameters ("cluster", "training.sharding").
bool is_section(std::string_view path);

/// The keys allowed directly under a section (for "did you mean" and for listing).
std::vector<std::string> section_keys(std::string_view section);

/// Sections that also accept a bare scalar, meaning the mapping {<key>: scalar}: `gpu: h100-sxm`
/// is `gpu: {preset: h100-sxm}`; `prompt_tokens: 512` is `prompt_tokens: {value: 512}`; `fine_tuning:
/// lora` is `fine_tuning: {method: lora}`.
std::optional<std::string> scalar_shorthand_key(std::string_view section);

/// The reference as Markdown (scenarios/SCHEMA.md) and as plain text (`memtwin schema`).
/// Another tool's name for a key (vLLM's engine arguments): the loader reads the alias as the key,
/// translating its value where the tools differ (enforce_eager is cuda_graphs negated). An alias and
/// its key given together are refused.
struct KeyAlias {
  enum class Value {
    same,           ///< the value as written
    negated,        ///< a flag meaning the opposite
    kv_cache_dtype  ///< vLLM's kv_cache_dtype: auto (the default), fp8, fp8_e4m3, fp8_e5m2 (fp8)
  };
  std::string alias;  ///< the path as written, e.g. inference.serving.tensor_parallel_size
  std::string key;    ///< memtwin's key
  Value value = Value::same;
  std::string tool;   ///< whose name it is
};
const std::vector<KeyAlias>& key_aliases();
/// The alias written at `path`, or null.
const KeyAlias* find_alias(std::string_view path);

std::string schema_markdown();
std::string schema_text();

}  // namespace memtwin
