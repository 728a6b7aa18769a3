// The registry of KV methods and what the rest of memtwin asks it: the schema entries, reading a
// scenario's compression, kernel formats, and the size model.
#include <algorithm>
#include <map>
#include <stdexcept>

#include "models/kv/kv_method_list.h"
#include "models/scenario/param_values.h"

namespace memtwin {
namespace {

const std::string kPrefix = "inference.kv_cache.compression.";

}  // namespace

const std::vector<const KvMethod*>& kv_methods() {
  using namespace kv_methods_detail;
  // The order the schema lists the parameters in (each at its first method) and the kernel formats
  // within a storage kind.
  static const std::vector<const KvMethod*> methods = [] {
    std::vector<const KvMethod*> all = {&none_method(), &kivi_method(),      &int8_method(),      &int4_method(),
                                        &int2_method(), &h2o_method(),       &streaming_method(), &snapkv_method(),
                                        &pyramidkv_method(), &entropy_method()};
    if (all.size() != kKvCompressionNames.names.size()) throw std::logic_error("a KV method without a descriptor");
    return all;
  }();
  return methods;
}

std::string kv_method_names(KvSelection selection) {
  std::string names;
  for (const KvMethod* m : kv_methods())
    if (m->selection == selection) names.append(names.empty() ? "" : ", ").append(m->name());
  return names;
}

const KvMethod& kv_method(KvCompression id) {
  for (const KvMethod* m : kv_methods())
    if (m->id == id) return *m;
  throw std::logic_error("KV method " + std::string(kKvCompressionNames.name(id)) + " has no descriptor");
}

std::unique_ptr<KvCompressor> make_kv_compressor(const CompressionSpec& spec, const KvShape& shape) {
  return kv_method(spec.method).make(spec, shape);
}

std::vector<ParamSpec> kv_compression_schema() {
  struct Merged {
    ParamSpec spec;
    std::vector<std::pair<std::string, std::string>> meanings;  // (methods, meaning) in first-use order
    std::vector<std::pair<std::string, std::string>> derived;   // (methods, default) of methods' own defaults
  };
  std::vector<Merged> merged;
  auto join = [](std::vector<std::pair<std::string, std::string>>& groups, const std::string& value, std::string_view method) {
    auto at = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.second == value; });
    if (at == groups.end()) groups.emplace_back(std::string(method), value);
    else at->first.append("/").append(method);
  };
  for (const KvMethod* m : kv_methods()) {
    for (const KvParameter& p : m->parameters) {
      auto at = std::find_if(merged.begin(), merged.end(), [&](const Merged& x) { return x.spec.path == kPrefix + p.key; });
      const std::optional<std::string> schema_default = p.default_in_schema ? p.default_value : std::nullopt;
      if (at == merged.end()) {
        Merged x;
        x.spec.path = kPrefix + p.key;
        x.spec.kind = p.kind;
        x.spec.default_value = schema_default;
        x.spec.min = p.min;
        x.spec.max = p.max;
        x.spec.min_exclusive = p.min_exclusive;
        merged.push_back(x);
        at = std::prev(merged.end());
      } else if (at->spec.kind != p.kind || at->spec.default_value != schema_default || at->spec.min != p.min ||
                 at->spec.max != p.max || at->spec.min_exclusive != p.min_exclusive) {
        // One key is one schema entry: the methods that share it must agree on what it is.
        throw std::logic_error("KV methods disagree on parameter " + p.key + " (" + std::string(m->name()) + ")");
      }
      join(at->meanings, p.meaning, m->name());
      if (!p.default_in_schema && p.default_value) join(at->derived, *p.default_value, m->name());
    }
  }
  std::vector<ParamSpec> out;
  for (Merged& x : merged) {
    for (const auto& [methods, meaning] : x.meanings) {
      if (!x.spec.doc.empty()) x.spec.doc.append("; ");
      x.spec.doc.append(methods).append(": ").append(meaning);
    }
    if (x.derived.size() == 1 && x.meanings.size() == 1) {
      x.spec.default_note = x.derived.front().second;
    } else {
      for (const auto& [methods, value] : x.derived) {
        if (!x.spec.default_note.empty()) x.spec.default_note.append(", ");
        x.spec.default_note.append(methods).append(" ").append(value);
      }
    }
    out.push_back(std::move(x.spec));
  }
  return out;
}

const KvParameter& KvParameterReader::parameter(const std::string& key) const {
  for (const KvParameter& p : method_.parameters)
    if (p.key == key) return p;
  throw std::logic_error("KV method " + std::string(method_.name()) + " reads " + key + ", not among its parameters");
}

int KvParameterReader::integer(const std::string& key) const {
  const KvParameter& p = parameter(key);
  if (values_.given(kPrefix + key) || p.default_in_schema) return values_.int32(kPrefix + key);
  return std::stoi(p.default_value.value());
}

double KvParameterReader::number(const std::string& key) const {
  const KvParameter& p = parameter(key);
  if (values_.given(kPrefix + key) || p.default_in_schema) return values_.number(kPrefix + key);
  return std::stod(p.default_value.value());
}

void KvParameterReader::fail(const std::string& key, const std::string& message) const {
  values_.fail(kPrefix + key, message);
}

CompressionSpec read_kv_compression(const ParamValues& values) {
  CompressionSpec c;
  c.method = values.choice(kPrefix + "method", kKvCompressionNames);
  const KvMethod& method = kv_method(c.method);
  // A parameter of another method, given with this one, is a mistake worth reporting.
  static const std::vector<ParamSpec> parameters = kv_compression_schema();
  for (const ParamSpec& p : parameters) {
    const std::string key = p.path.substr(kPrefix.size());
    const bool own = std::any_of(method.parameters.begin(), method.parameters.end(),
                                 [&](const KvParameter& q) { return q.key == key; });
    if (!own && values.given(p.path)) values.fail(p.path, "is not a parameter of method " + std::string(method.name()));
  }
  method.read(KvParameterReader(values, method), c);
  return c;
}

const std::vector<KvKernelFormat>& kv_kernel_formats() {
  static const std::vector<KvKernelFormat> formats = [] {
    std::vector<KvKernelFormat> out;
    for (KvStorage storage : {KvStorage::vectors, KvStorage::token_groups, KvStorage::channel_key_groups})
      for (const KvMethod* m : kv_methods())
        if (m->storage == storage) out.insert(out.end(), m->kernel_formats.begin(), m->kernel_formats.end());
    return out;
  }();
  return formats;
}

std::string decode_kernel_format(const KvCacheSpec& kv) {
  const KvMethod& m = kv_method(kv.compression.method);
  switch (m.storage) {
    case KvStorage::token_groups: return std::string(m.name());
    case KvStorage::channel_key_groups: return std::string(m.name()) + std::to_string(kv.compression.bits);
    case KvStorage::vectors: break;
  }
  return kv.dtype == KvDtype::fp8 ? "fp8" : "fp16";  // the eviction methods keep fewer of the same vectors
}

std::string residual_kernel_format(const KvCacheSpec& kv) {
  const KvMethod& m = kv_method(kv.compression.method);
  return m.storage == KvStorage::channel_key_groups ? std::string(m.name()) + "_fp16" : std::string();
}

KvSuggestion kv_compression_to_suggest() {
  // KIVI-2: an eighth of a 16-bit cache's bytes, with the small quality loss its paper reports.
  KvSuggestion s;
  s.spec.method = KvCompression::kivi;
  s.spec.bits = 2;
  s.written = "inference.kv_cache.compression={method: kivi, bits: 2}";
  return s;
}

}  // namespace memtwin
