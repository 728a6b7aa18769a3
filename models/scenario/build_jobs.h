#pragma once
// `jobs:` — several training and serving jobs on one shared cluster. The section is a list, outside
// the key-by-key schema: each job is {name, scenario: a training or serving scenario file
// (relative to this one), first_node, first_gpu (0 if absent)}. The job's own cluster says how many nodes and GPUs
// per node it takes and must name the shared cluster's GPU; jobs may not share a GPU. Errors point
// at the job's key in this file, or inside the job's own file.
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "models/scenario.h"
#include "models/scenario/scenario_tree.h"

namespace memtwin {

std::vector<JobSpec> build_jobs(const YAML::Node& jobs, const ScenarioTree& tree, const Cluster& shared);

/// The jobs as the resolved scenario echoes them (their scenario paths as written).
nlohmann::ordered_json jobs_json(const std::vector<JobSpec>& jobs, const YAML::Node& written);

}  // namespace memtwin
