#include "models/scenario/calibration.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>

#include <yaml-cpp/yaml.h>

#include "models/kv/kv_method.h"
#include "models/scenario/calibration_collectives.h"
#include "models/scenario/did_you_mean.h"
#include "models/scenario/yaml_limits.h"
#include "models/schema.h"
#include "models/unit_parse.h"

namespace memtwin {

namespace {

double as_number(Bytes b) { return b.as_double(); }
template <class Q>
double as_number(Q q) {
  return q.value();
}

// The range the schema gives the scenario key `cluster.KEY` (KEY as the calibration file names it).
void check_calibration_value(const std::string& key, double v, const SourceLocation& where) {
  if (!std::isfinite(v)) throw ScenarioError(where, key, "must be a finite number");
  std::string path = "cluster." + key;
  if (path.rfind("cluster.efficiency.gemm_by_rows", 0) == 0) path = "cluster.efficiency.gemm";
  if (path.rfind("cluster.efficiency.gemm_memory_by_", 0) == 0) path = "cluster.efficiency.gemm_memory";
  for (const char* suffix : {"_hd64", "_hd256"}) {
    const auto at = path.find(suffix);
    if (at != std::string::npos) path = path.substr(0, at);
  }
  const ParamSpec* spec = find_param(path);
  auto shortest = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return std::string(buf);
  };
  const double min = spec && spec->min ? *spec->min : 0;
  const bool exclusive = spec && spec->min ? spec->min_exclusive : true;
  if (exclusive ? v <= min : v < min) {
    throw ScenarioError(where, key, "must be " + std::string(exclusive ? "greater than " : "at least ") + shortest(min) +
                                        ", as the scenario's " + path + " (got " + shortest(v) + ")");
  }
  if (spec && spec->max && v > *spec->max) {
    throw ScenarioError(where, key, "must be at most " + shortest(*spec->max) + ", as the scenario's " + path +
                                        " (got " + shortest(v) + ")");
  }
}

}  // namespace

void refuse_duplicate_keys(const std::string& path, const YAML::Node& map, const std::string& prefix) {
  // yaml-cpp keeps both entries of a repeated key and lookups see the first; the scenario loader
  // refuses them, and so do the other readers.
  std::map<std::string, int> seen;
  for (auto entry = map.begin(); entry != map.end(); ++entry) {
    if (!entry->first.IsScalar()) continue;
    const std::string key = entry->first.Scalar();
    const int line = entry->first.Mark().line + 1;
    const auto [it, fresh] = seen.emplace(key, line);
    if (!fresh) {
      throw ScenarioError({path, line, entry->first.Mark().column + 1}, prefix.empty() ? key : prefix + "." + key,
                          "duplicate key (first at line " + std::to_string(it->second) + ")");
    }
  }
}

void apply_calibration(const std::string& path, const ParamValues& scenario, Cluster& c) {
  if (std::filesystem::exists(path)) refuse_unreadable_yaml_file(path, {path, 0, 0}, "cluster.calibration", "the calibration file");
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw ScenarioError({path, e.mark.line + 1, e.mark.column + 1}, "", "not a valid calibration file: " + e.msg);
  }
  if (!root.IsMap()) throw ScenarioError({path, 1, 1}, "", "a calibration file is a mapping");
  refuse_unbounded_or_invalid_text(root, path);
  // Each calibration key, the scenario key it stands in for, and how to apply it.
  using Apply = std::function<void(const YAML::Node&, const SourceLocation&, const std::string&)>;
  // Every value obeys the range of the scenario key it stands in for (one definition: the schema),
  // and is finite.
  auto number = [](double& field) {
    return Apply([&field](const YAML::Node& n, const SourceLocation& where, const std::string& key) {
      double v = 0;
      try {
        v = n.as<double>();
      } catch (const YAML::Exception&) {
        throw ScenarioError(where, key, "expected a number");
      }
      check_calibration_value(key, v, where);
      field = v;
    });
  };
  // A measured figure in its unit ("61.2GFLOPS", "9.8GB/s", "12us", "45MiB").
  auto measured = [](auto parse, auto& field) {
    return Apply([parse, &field](const YAML::Node& n, const SourceLocation& where, const std::string& key) {
      try {
        if (!n.IsScalar()) throw UnitError("expected a value with its unit");
        const auto v = parse(n.Scalar());
        check_calibration_value(key, as_number(v), where);
        field = v;
      } catch (const UnitError& e) {
        throw ScenarioError(where, key, e.what());
      }
    });
  };
  auto bytes = [&](Bytes& field) { return measured(parse_bytes, field); };
  auto bandwidth = [&](BytesPerSec& field) { return measured(parse_bandwidth, field); };
  std::map<std::string, std::pair<std::string, Apply>> known = {
      {"efficiency.gemm", {"cluster.efficiency.gemm", number(c.efficiency.gemm)}},
      {"efficiency.attention", {"cluster.efficiency.attention", number(c.efficiency.attention)}},
      {"efficiency.memory", {"cluster.efficiency.memory", number(c.efficiency.memory)}},
      {"efficiency.gemm_memory", {"cluster.efficiency.gemm_memory", number(c.efficiency.gemm_memory)}},
      {"efficiency.gemm_overlap", {"cluster.efficiency.gemm_overlap", number(c.efficiency.gemm_overlap)}},
      {"runtime.cuda_context", {"cluster.runtime.cuda_context", bytes(c.runtime.cuda_context)}},
      {"runtime.nccl_buffers", {"cluster.runtime.nccl_buffers", bytes(c.runtime.nccl_buffers)}},
      {"runtime.framework_overhead", {"cluster.runtime.framework_overhead", bytes(c.runtime.framework_overhead)}},
      {"runtime.cuda_graph_pool", {"cluster.runtime.cuda_graph_pool", bytes(c.runtime.cuda_graph_pool)}},
      {"runtime.allocator_waste", {"cluster.runtime.allocator_waste", number(c.runtime.allocator_waste)}},
      {"kernels.prompt_scoring", {"cluster.kernels.prompt_scoring", number(c.prompt_scoring_pairs_per_s)}},
      {"runtime.eager_layer_overhead",
       {"cluster.runtime.eager_layer_overhead", measured(parse_duration, c.runtime.eager_layer_overhead)}},
      {"host.pcie_bandwidth", {"cluster.host.pcie_bandwidth", bandwidth(c.host.pcie_bandwidth)}},
      {"host.cpu_adam_params_per_s", {"cluster.host.cpu_adam_params_per_s", number(c.host.cpu_adam_params_per_s)}},
      // Measured device figures (the host device has no datasheet): they replace the catalog's.
      {"gpu.hbm_bandwidth", {"cluster.gpu.hbm_bandwidth", bandwidth(c.gpu.hbm_bandwidth)}},
      {"intra_node.bandwidth", {"cluster.intra_node.bandwidth", bandwidth(c.intra_node.bandwidth)}},
      {"intra_node.latency", {"cluster.intra_node.latency", measured(parse_duration, c.intra_node.latency)}},
  };
  // The NVMe tier's measured rates apply where the scenario has one.
  BytesPerSec ignored_read, ignored_write;
  known["nvme.read_bandwidth"] = {"cluster.nvme.read_bandwidth", bandwidth(c.nvme ? c.nvme->read_bandwidth : ignored_read)};
  known["nvme.write_bandwidth"] = {"cluster.nvme.write_bandwidth", bandwidth(c.nvme ? c.nvme->write_bandwidth : ignored_write)};
  for (const KvKernelFormat& kv_format : kv_kernel_formats()) {
    const char* format = kv_format.name.c_str();  // the registry's: it outlives the lambdas
    for (const auto& entry : {std::pair{"decode_attention", &c.decode_attention_elements_per_s},
                              {"kv_write", &c.kv_write_elements_per_s}}) {
      // Named copies, not a structured binding: clang 14 cannot capture one in the lambda below.
      const char* kernel = entry.first;
      std::map<std::string, double>* rates = entry.second;
      if (std::string(kernel) == "kv_write" && !kv_format.write_kernel) continue;
      const std::string key = std::string("kernels.") + kernel + "." + format;
      known[key] = {"cluster." + key, Apply([rates, format, number](const YAML::Node& n, const SourceLocation& where,
                                                                      const std::string& k) {
                      double rate = 0;
                      number(rate)(n, where, k);
                      (*rates)[format] = rate;
                    })};
    }
  }
  for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16, Precision::fp8}) {
    const std::string name(kPrecisionNames.name(p));
    known["gpu.flops." + name] = {"cluster.gpu.flops." + name,
                                  Apply([&c, p](const YAML::Node& n, const SourceLocation& where, const std::string& key) {
                                    try {
                                      if (!n.IsScalar()) throw UnitError("expected a rate such as 61.2GFLOPS");
                                      const FlopsPerSec rate = parse_flops_rate(n.Scalar());
                                      check_calibration_value(key, rate.value(), where);
                                      c.gpu.flops[p] = rate;
                                    } catch (const UnitError& e) {
                                      throw ScenarioError(where, key, e.what());
                                    }
                                  })};
  }
  // A table of fractions by rows ({1: 0.4, 8: 0.35}), as gemm_by_rows and the weight GEMMs' tables are.
  auto read_rows_table = [&](const YAML::Node& node, const SourceLocation& where, const std::string& key,
                             std::map<int, double>& table) {
    if (!node.IsMap()) throw ScenarioError(where, key, "expected a mapping of rows to fractions, e.g. {64: 0.7, 512: 0.95}");
    refuse_duplicate_keys(path, node, key);
    for (auto point = node.begin(); point != node.end(); ++point) {
      const SourceLocation at{path, point->first.Mark().line + 1, point->first.Mark().column + 1};
      int rows = 0;
      try {
        rows = point->first.as<int>();
      } catch (const YAML::Exception&) {
        throw ScenarioError(at, key, "rows must be a positive integer");
      }
      if (rows <= 0) throw ScenarioError(at, key, "rows must be a positive integer");
      double value = 0;
      number(value)(point->second, at, key + "." + std::to_string(rows));
      table[rows] = value;
    }
  };
  std::vector<std::string> names;
  for (const auto& [name, _] : known) names.push_back(name);
  const std::vector<std::string> sections = {"efficiency", "runtime", "host", "gpu", "intra_node", "kernels", "nvme", "device", "collectives"};
  // Walks nested mappings, naming each leaf by its dotted path ("gpu.flops.fp32").
  std::function<void(const YAML::Node&, const std::string&)> walk = [&](const YAML::Node& body, const std::string& prefix) {
    refuse_duplicate_keys(path, body, prefix);
    for (auto entry = body.begin(); entry != body.end(); ++entry) {
      const std::string key = prefix + "." + entry->first.Scalar();
      const YAML::Mark mark = entry->second.Mark();
      const SourceLocation where{path, mark.line + 1, mark.column + 1};
      if (key.rfind("kernels.decode_attention.", 0) == 0 && entry->second.IsMap()) {
        // A table by working set: {1MiB: 1.1e9, 64MiB: 6e8}; FORMAT_hdN for head_dim N (the
        // plain FORMAT was measured at head_dim 128).
        const std::string format = key.substr(std::string("kernels.decode_attention.").size());
        const auto suffix = format.find("_hd");
        const std::string base_key = suffix == std::string::npos ? key : key.substr(0, key.size() - (format.size() - suffix));
        if (!known.count(base_key) ||
            (suffix != std::string::npos && format.substr(suffix) != "_hd64" && format.substr(suffix) != "_hd256")) {
          throw ScenarioError(where, key, "unknown calibration key" + did_you_mean(key, names));
        }
        if (scenario.given_by_user("cluster." + base_key)) continue;
        auto& table = c.decode_attention_by_bytes[format];
        for (auto point = entry->second.begin(); point != entry->second.end(); ++point) {
          const SourceLocation at{path, point->first.Mark().line + 1, point->first.Mark().column + 1};
          double working_set = 0, rate = 0;
          try {
            working_set = parse_bytes(point->first.Scalar()).as_double();
          } catch (const UnitError& e) {
            throw ScenarioError(at, key, std::string("a working set such as 8MiB: ") + e.what());
          }
          number(rate)(point->second, at, key);
          table[working_set] = rate;
        }
        continue;
      }
      if (key == "efficiency.gemm_by_rows" || key == "efficiency.gemm_memory_by_rows") {
        // Measured GEMM efficiency (or, from memory, the whole GEMM's weight rate) by rows.
        const bool memory = key == "efficiency.gemm_memory_by_rows";
        // The scenario's own `efficiency.gemm` (or `gemm_memory`) replaces the table.
        if (scenario.given_by_user(memory ? "cluster.efficiency.gemm_memory" : "cluster.efficiency.gemm")) continue;
        auto& table = memory ? c.efficiency.gemm_memory_by_rows : c.efficiency.gemm_by_rows;
        table.clear();
        read_rows_table(entry->second, where, key, table);
        continue;
      }
      if (key == "efficiency.gemm_memory_by_shape") {
        // The whole GEMM's weight rate by rows, per weight shape INNERxOUTPUTS.
        if (!entry->second.IsMap()) {
          throw ScenarioError(where, key, "expected a mapping of shapes to tables by rows, e.g. {512x1536: {1: 0.9, 2: 0.5}}");
        }
        if (scenario.given_by_user("cluster.efficiency.gemm_memory")) continue;
        c.efficiency.gemm_memory_by_shape.clear();
        refuse_duplicate_keys(path, entry->second, key);
        for (auto shape = entry->second.begin(); shape != entry->second.end(); ++shape) {
          const std::string name = shape->first.Scalar();
          const SourceLocation at{path, shape->first.Mark().line + 1, shape->first.Mark().column + 1};
          const auto x = name.find('x');
          auto whole = [](std::optional<double> v) {
            return v && *v >= 1 && *v <= double(1 << 24) && *v == std::floor(*v) ? static_cast<std::int64_t>(*v) : 0;
          };
          const std::int64_t inner = x == std::string::npos ? 0 : whole(parse_plain_number(name.substr(0, x)));
          const std::int64_t outputs = x == std::string::npos ? 0 : whole(parse_plain_number(name.substr(x + 1)));
          if (inner == 0 || outputs == 0) {
            throw ScenarioError(at, key + "." + name, "a shape is INNERxOUTPUTS, two positive whole numbers such as 512x1536");
          }
          read_rows_table(shape->second, at, key + "." + name, c.efficiency.gemm_memory_by_shape[{inner, outputs}]);
        }
        continue;
      }
      auto it = known.find(key);
      if (it == known.end() && entry->second.IsMap()) {
        walk(entry->second, key);
        continue;
      }
      if (it == known.end()) throw ScenarioError(where, key, "unknown calibration key" + did_you_mean(key, names));
      if (scenario.given_by_user(it->second.first)) continue;  // the scenario's own value wins
      it->second.second(entry->second, where, key);
    }
  };
  refuse_duplicate_keys(path, root, "");
  for (auto section = root.begin(); section != root.end(); ++section) {
    const std::string top = section->first.Scalar();
    if (top == "device") continue;  // free text
    if (top == "collectives" && section->second.IsMap()) {
      c.collectives.measured = read_measured_collectives(path, section->second);
      continue;
    }
    if (!section->second.IsMap() || std::find(sections.begin(), sections.end(), top) == sections.end()) {
      throw ScenarioError({path, section->first.Mark().line + 1, section->first.Mark().column + 1}, top,
                          "unknown section" + did_you_mean(top, sections));
    }
    walk(section->second, top);
  }
}

}  // namespace memtwin
