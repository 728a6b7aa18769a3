#include "models/scenario_loader.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/embedded.h"
#include "models/scenario/build_jobs.h"
#include "models/scenario/builders.h"
#include "models/scenario/param_values.h"
#include "models/scenario/scenario_tree.h"
#include "models/scenario/yaml_limits.h"

namespace memtwin {

LoadedScenario load_scenario_text(std::string_view text, const std::string& name, const std::string& base_dir,
                                  const std::vector<std::string>& overrides) {
  ScenarioTree tree = build_scenario_tree(text, name, base_dir, overrides);
  // `jobs:` is a list of jobs, read on its own (build_jobs.h); every other key goes by the schema.
  const YAML::Node& root = tree.root;  // const: looking a key up must not add it
  const bool has_jobs = root.IsMap() && root["jobs"].IsDefined();
  const YAML::Node jobs = has_jobs ? root["jobs"] : YAML::Node(YAML::NodeType::Undefined);  // with its marks (lines)
  if (has_jobs) tree.root.remove("jobs");
  ParamValues values(tree);

  LoadedScenario out;
  Scenario& s = out.scenario;
  s.source_file = name;
  if (!values.given("name")) values.fail("name", "is required");
  s.name = values.text("name");
  if (s.name.empty()) values.fail("name", "must not be empty");
  s.description = values.text("description");
  s.seed = static_cast<std::uint64_t>(values.integer("seed"));
  s.simulation.fidelity = values.choice("simulation.fidelity", kFidelityNames);
  s.simulation.time_limit = values.duration("simulation.time_limit");
  s.cluster = build_cluster(values);
  if (has_jobs) {
    for (const char* own : {"model", "training", "inference"}) {
      if (values.has_section(own)) {
        values.fail(own, "a scenario of jobs has no " + std::string(own) + " of its own: each job's scenario file has it");
      }
    }
    s.jobs = build_jobs(jobs, tree, s.cluster);
    out.resolved = values.resolved_json();
    out.resolved["jobs"] = jobs_json(s.jobs, jobs);
    return out;
  }
  s.model = build_model(values);

  const bool training = values.has_section("training");
  const bool inference = values.has_section("inference");
  if (training == inference) {
    values.fail("", training ? "give one workload: training or inference, not both"
                             : "a scenario needs a workload: a training or an inference section");
  }
  if (training) s.training = build_training(values, s.cluster, s.model);
  if (inference) s.inference = build_inference(values, s.cluster, s.model);
  out.resolved = values.resolved_json();
  return out;
}

LoadedScenario load_scenario_file(const std::string& path, const std::vector<std::string>& overrides) {
  refuse_unreadable_yaml_file(path, {path}, "", "the scenario file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ScenarioError({path}, "", "cannot read the scenario file (does it exist?)");
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string dir = std::filesystem::path(path).parent_path().string();
  return load_scenario_text(buffer.str(), path, dir, overrides);
}

LoadedScenario load_quickstart_scenario(const std::vector<std::string>& overrides) {
  auto text = embedded_file("quickstart.yaml");
  if (!text) throw std::logic_error("quickstart scenario not embedded");
  return load_scenario_text(*text, "<embedded scenarios/quickstart.yaml>", "", overrides);
}

namespace {
// A catalog entry is validated through the same path as a scenario: a one-key document.
template <class T, class Build>
T from_catalog(const std::string& section_yaml, Build build) {
  ScenarioTree tree = build_scenario_tree(section_yaml, "<catalog>", "", {});
  ParamValues values(tree);
  return build(values);
}
}  // namespace

GpuSpec catalog_gpu(const std::string& name) {
  return from_catalog<GpuSpec>("cluster: {gpu: {preset: \"" + name + "\"}}", build_gpu);
}

ModelSpec catalog_model(const std::string& name) {
  return from_catalog<ModelSpec>("model: {preset: \"" + name + "\"}", build_model);
}

std::vector<std::string> catalog_gpu_names() { return catalog_names("presets/gpus.yaml"); }
std::vector<std::string> catalog_model_names() { return catalog_names("presets/models.yaml"); }

}  // namespace memtwin
