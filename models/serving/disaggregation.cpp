#include "models/serving/disaggregation.h"

#include <stdexcept>

namespace memtwin {

Scenario instance_scenario(const Scenario& deployment, InstanceRole role) {
  if (!deployment.inference || !deployment.inference->disaggregation || role == InstanceRole::colocated) {
    throw std::logic_error("an instance scenario of a deployment without disaggregation");
  }
  Scenario s = deployment;
  const Disaggregation d = *s.inference->disaggregation;
  s.inference->disaggregation.reset();
  ServingSpec& sv = s.inference->serving;
  sv.role = role;
  sv.replicas = role == InstanceRole::prefill ? d.prefill_replicas : d.decode_replicas;
  sv.tensor_parallel = role == InstanceRole::prefill ? d.prefill_tensor_parallel : d.decode_tensor_parallel;
  s.cluster = side_cluster(deployment, role);
  return s;
}

const Cluster& side_cluster(const Scenario& deployment, InstanceRole role) {
  const Disaggregation& d = *deployment.inference->disaggregation;
  const std::optional<Cluster>& own = role == InstanceRole::prefill ? d.prefill_cluster : d.decode_cluster;
  return own ? *own : deployment.cluster;
}

int first_gpu_of(const Disaggregation& d, const Cluster& cluster, InstanceRole role) {
  if (role != InstanceRole::decode) return 0;
  const auto gpu_of = [&](const std::optional<Cluster>& own) { return own ? own->gpu.name : cluster.gpu.name; };
  if (gpu_of(d.prefill_cluster) == gpu_of(d.decode_cluster)) return d.prefill_gpus();
  const int per_node = cluster.gpus_per_node;
  return (d.prefill_gpus() + per_node - 1) / per_node * per_node;  // the decode side's nodes are its own
}

std::vector<const Cluster*> node_clusters(const Scenario& deployment) {
  const Cluster& c = deployment.cluster;
  std::vector<const Cluster*> out(static_cast<std::size_t>(c.nodes), &c);
  const Disaggregation* d = deployment.inference && deployment.inference->disaggregation ? &*deployment.inference->disaggregation : nullptr;
  if (!d) return out;
  const std::pair<InstanceRole, int> sides[] = {{InstanceRole::prefill, d->prefill_gpus()}, {InstanceRole::decode, d->decode_gpus()}};
  for (const auto& [role, gpus] : sides) {
    const int first = first_gpu_of(*d, c, role);
    for (int g = first; g < first + gpus; ++g) out[static_cast<std::size_t>(g / c.gpus_per_node)] = &side_cluster(deployment, role);
  }
  return out;
}

std::vector<GpusOfType> deployment_gpus(const Scenario& deployment) {
  const Inference& inf = *deployment.inference;
  if (!inf.disaggregation) return {{deployment.cluster.gpu.name, inf.gpus(), deployment.cluster.price_per_gpu_hour}};
  std::vector<GpusOfType> out;
  const std::pair<InstanceRole, int> sides[] = {{InstanceRole::prefill, inf.disaggregation->prefill_gpus()},
                                                {InstanceRole::decode, inf.disaggregation->decode_gpus()}};
  for (const auto& [role, gpus] : sides) {
    const Cluster& c = side_cluster(deployment, role);
    if (!out.empty() && out.back().gpu == c.gpu.name) {
      out.back().count += gpus;
    } else {
      out.push_back({c.gpu.name, gpus, c.price_per_gpu_hour});
    }
  }
  return out;
}

}  // namespace memtwin
