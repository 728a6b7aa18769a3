#pragma once
// Disaggregated serving (inference.disaggregation): prefill instances and decode instances on
// separate GPUs, each an engine of its own under the rules the colocated engine follows. Each side
// is described by an instance scenario, the deployment's scenario with that side's replicas, tensor
// parallelism, role and GPU type; the memory model, the iteration model and the batch scheduler
// read it as they read any scenario. The prefill instances take the first GPUs in rank order, the
// decode instances the next, from the next node on when the sides' GPU types differ (a node holds
// GPUs of one type).
#include <optional>
#include <string>
#include <vector>

#include "models/scenario.h"

namespace memtwin {

/// The deployment's `role` side as a scenario of its own (`role` is prefill or decode).
Scenario instance_scenario(const Scenario& deployment, InstanceRole role);

/// The cluster a side's GPUs are part of: the deployment's, or its nodes of the side's GPU type.
const Cluster& side_cluster(const Scenario& deployment, InstanceRole role);

/// The first GPU (rank) of a side's instances.
int first_gpu_of(const Disaggregation& d, const Cluster& cluster, InstanceRole role);

/// The cluster each node is built of, by node: a side's nodes are of its GPU type; nodes no
/// instance uses are of cluster.gpu. Pointers into `deployment`.
std::vector<const Cluster*> node_clusters(const Scenario& deployment);

/// GPUs of one type a deployment pays for.
struct GpusOfType {
  std::string gpu;  ///< catalog name, or "custom"
  int count = 0;
  std::optional<double> price_per_hour;  ///< USD per GPU-hour; empty: not known
};

/// The GPUs a serving deployment runs on, by type: its replicas' on cluster.gpu, or each
/// disaggregated side's on its own type (sides of one type together).
std::vector<GpusOfType> deployment_gpus(const Scenario& deployment);

}  // namespace memtwin
