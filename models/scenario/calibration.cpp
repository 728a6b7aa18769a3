#include "models/scenario/calibration.h"

#include <functional>
#include <map>

#include <yaml-cpp/yaml.h>

#include "models/scenario/did_you_mean.h"
#include "models/unit_parse.h"

namespace memtwin {

void apply_calibration(const std::string& path, const ParamValues& scenario, Cluster& c) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw ScenarioError({path, e.mark.line + 1, e.mark.column + 1}, "", "not a valid calibration file: " + e.msg);
  }
  if (!root.IsMap()) throw ScenarioError({path, 1, 1}, "", "a calibration file is a mapping");
  // Each calibration key, the scenario key it stands in for, and how to apply it.
  using Apply = std::function<void(const YAML::Node&, const SourceLocation&, const std::string&)>;
  auto fraction = [](double& field) {
    return Apply([&field](const YAML::Node& n, const SourceLocation& where, const std::string& key) {
      try {
        const double v = n.as<double>();
        if (!(v > 0 && v <= 1)) throw ScenarioError(where, key, "must be in (0, 1]");
        field = v;
      } catch (const YAML::Exception&) {
        throw ScenarioError(where, key, "expected a number");
      }
    });
  };
  auto bytes = [](Bytes& field) {
    return Apply([&field](const YAML::Node& n, const SourceLocation& where, const std::string& key) {
      try {
        field = parse_bytes(n.Scalar());
      } catch (const UnitError& e) {
        throw ScenarioError(where, key, e.what());
      }
    });
  };
  const std::map<std::string, std::pair<std::string, Apply>> known = {
      {"efficiency.gemm", {"cluster.efficiency.gemm", fraction(c.efficiency.gemm)}},
      {"efficiency.attention", {"cluster.efficiency.attention", fraction(c.efficiency.attention)}},
      {"efficiency.memory", {"cluster.efficiency.memory", fraction(c.efficiency.memory)}},
      {"runtime.cuda_context", {"cluster.runtime.cuda_context", bytes(c.runtime.cuda_context)}},
      {"runtime.nccl_buffers", {"cluster.runtime.nccl_buffers", bytes(c.runtime.nccl_buffers)}},
      {"runtime.framework_overhead", {"cluster.runtime.framework_overhead", bytes(c.runtime.framework_overhead)}},
      {"runtime.cuda_graph_pool", {"cluster.runtime.cuda_graph_pool", bytes(c.runtime.cuda_graph_pool)}},
      {"host.pcie_bandwidth", {"cluster.host.pcie_bandwidth", Apply([&c](const YAML::Node& n, const SourceLocation& where,
                                                                         const std::string& key) {
         try {
           c.host.pcie_bandwidth = parse_bandwidth(n.Scalar());
         } catch (const UnitError& e) {
           throw ScenarioError(where, key, e.what());
         }
       })}},
  };
  std::vector<std::string> names;
  for (const auto& [name, _] : known) names.push_back(name);
  for (auto section = root.begin(); section != root.end(); ++section) {
    const std::string top = section->first.Scalar();
    const YAML::Node body = section->second;
    if (top == "device") continue;  // free text
    if (!body.IsMap()) {
      throw ScenarioError({path, section->first.Mark().line + 1, section->first.Mark().column + 1}, top,
                          "unknown section" + did_you_mean(top, {"efficiency", "runtime", "host", "device"}));
    }
    for (auto entry = body.begin(); entry != body.end(); ++entry) {
      const std::string key = top + "." + entry->first.Scalar();
      const YAML::Mark mark = entry->second.Mark();
      const SourceLocation where{path, mark.line + 1, mark.column + 1};
      auto it = known.find(key);
      if (it == known.end()) throw ScenarioError(where, key, "unknown calibration key" + did_you_mean(key, names));
      if (scenario.given(it->second.first)) continue;  // the scenario's own value wins
      it->second.second(entry->second, where, key);
    }
  }
}

}  // namespace memtwin
