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
  return s;
}

int first_gpu_of(const Disaggregation& d, InstanceRole role) {
  return role == InstanceRole::decode ? d.prefill_replicas * d.prefill_tensor_parallel : 0;
}

}  // namespace memtwin
