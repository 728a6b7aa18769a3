#include "models/scenario/build_jobs.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>

#include "models/memory/serving_memory.h"
#include "models/serving/disaggregation.h"
#include "models/scenario/did_you_mean.h"
#include "models/scenario/yaml_limits.h"
#include "models/scenario_loader.h"

namespace memtwin {
namespace {

std::string str(long long n) { return std::to_string(n); }

// A job's keys, in the order the documentation gives them.
const std::vector<std::string> kJobKeys = {"name", "scenario", "first_node", "first_gpu"};

// Whether a scenario file has a `jobs:` section (false when it is too large or not YAML: loading it
// says why).
bool holds_jobs(const std::filesystem::path& file) {
  std::error_code ignored;
  if (std::filesystem::file_size(file, ignored) > kMaxYamlFileBytes) return false;
  try {
    const YAML::Node root = YAML::LoadFile(file.string());
    return root.IsMap() && root["jobs"].IsDefined();
  } catch (const YAML::Exception&) {
    return false;
  }
}

}  // namespace

std::vector<JobSpec> build_jobs(const YAML::Node& jobs, const ScenarioTree& tree, const Cluster& shared) {
  auto fail = [&](const std::string& key, const YAML::Node& at, const std::string& message) -> void {
    throw ScenarioError(tree.locate(key, at.Mark()), key, message);
  };
  if (!jobs.IsSequence() || jobs.size() == 0) {
    fail("jobs", jobs, "expected a list of jobs, each {name, scenario, first_node, first_gpu}");
  }
  std::vector<JobSpec> out;
  std::set<std::string> names;
  std::vector<int> owner(static_cast<std::size_t>(shared.total_gpus()), -1);  // the job on each GPU
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const YAML::Node job = jobs[i];
    const std::string at = "jobs[" + str(static_cast<long long>(i)) + "]";
    if (!job.IsMap()) fail(at, job, "expected a mapping {name, scenario, first_node, first_gpu}");
    for (const auto& entry : job) {
      const std::string key = entry.first.as<std::string>();
      if (std::find(kJobKeys.begin(), kJobKeys.end(), key) == kJobKeys.end()) {
        fail(at + "." + key, entry.first, "unknown key '" + key + "'" + did_you_mean(key, kJobKeys) + " (a job has name, scenario, "
                                                                                                       "first_node, first_gpu)");
      }
    }
    auto scalar = [&](const char* key) {
      const YAML::Node v = job[key];
      if (!v.IsDefined() || !v.IsScalar() || v.Scalar().empty()) fail(at + "." + key, v.IsDefined() ? v : job, "is required");
      return v.Scalar();
    };
    auto count = [&](const char* key) {
      const YAML::Node v = job[key];
      if (!v.IsDefined()) return 0;
      int n = -1;
      if (!v.IsScalar() || !YAML::convert<int>::decode(v, n) || n < 0) fail(at + "." + key, v, "expected a whole number >= 0");
      return n;
    };
    JobSpec spec;
    spec.name = scalar("name");
    if (!names.insert(spec.name).second) fail(at + ".name", job["name"], "another job is named '" + spec.name + "'");
    const std::filesystem::path file = std::filesystem::path(tree.base_dir) / scalar("scenario");
    const YAML::Node file_node = job["scenario"];
    if (!std::filesystem::is_regular_file(file)) fail(at + ".scenario", file_node, "no scenario file " + file.string());
    spec.first_node = count("first_node");
    spec.first_gpu = count("first_gpu");
    // A job's file may not hold jobs of its own (they could name this file again): read before it is loaded.
    if (holds_jobs(file)) fail(at + ".scenario", file_node, file.string() + " is itself a scenario of jobs");
    // Errors inside the job's own file point there.
    auto scenario = std::make_shared<Scenario>(load_scenario_file(file.string()).scenario);
    if (scenario->inference) {
      const ServingMemory memory = serving_memory(*scenario);
      if (!memory.fits) {
        fail(at + ".scenario", file_node, file.string() + " does not fit its GPUs (" + memory.why_not +
                                              "): a serving job must, to serve beside the others; run it alone for the memory report");
      }
    }
    const Cluster& own = scenario->cluster;
    if (own.gpu.name != shared.gpu.name) {
      fail(at + ".scenario", file_node, "the job runs on " + own.gpu.name + " GPUs; the shared cluster's are " + shared.gpu.name);
    }
    if (scenario->inference && scenario->inference->disaggregation) {
      for (InstanceRole role : {InstanceRole::prefill, InstanceRole::decode}) {
        const std::string& side = side_cluster(*scenario, role).gpu.name;
        if (side != shared.gpu.name) {
          fail(at + ".scenario", file_node, std::string("the job's ") + (role == InstanceRole::prefill ? "prefill" : "decode") +
                                                " instances run on " + side + " GPUs; the shared cluster's are " + shared.gpu.name);
        }
      }
    }
    if (spec.first_node + own.nodes > shared.nodes) {
      fail(at + ".first_node", job["first_node"].IsDefined() ? job["first_node"] : job,
           "the job's " + str(own.nodes) + " nodes from node " + str(spec.first_node) + " pass the shared cluster's " +
               str(shared.nodes));
    }
    if (spec.first_gpu + own.gpus_per_node > shared.gpus_per_node) {
      fail(at + ".first_gpu", job["first_gpu"].IsDefined() ? job["first_gpu"] : job,
           "the job's " + str(own.gpus_per_node) + " GPUs per node from GPU " + str(spec.first_gpu) + " pass the shared cluster's " +
               str(shared.gpus_per_node));
    }
    spec.scenario = scenario;
    for (int gpu : spec.placement(shared)) {
      int& taken = owner[static_cast<std::size_t>(gpu)];
      if (taken >= 0) {
        fail(at + ".first_gpu", job, "node " + str(gpu / shared.gpus_per_node) + "'s GPU " + str(gpu % shared.gpus_per_node) +
                                         " is job '" + out[static_cast<std::size_t>(taken)].name + "''s already");
      }
      taken = static_cast<int>(out.size());
    }
    out.push_back(std::move(spec));
  }
  return out;
}

nlohmann::ordered_json jobs_json(const std::vector<JobSpec>& jobs, const YAML::Node& written) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    out.push_back({{"name", jobs[i].name},
                   {"scenario", written[i]["scenario"].Scalar()},
                   {"first_node", jobs[i].first_node},
                   {"first_gpu", jobs[i].first_gpu}});
  }
  return out;
}

}  // namespace memtwin
