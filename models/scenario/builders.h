#pragma once
// Stage 3 of loading: typed Scenario parts from validated ParamValues, with the checks that span
// several keys (tensor parallel must divide heads, a ZeRO stage needs strategy zero, ...). Each
// builder throws ScenarioError pointing at the key that makes the combination impossible.
#include "models/scenario.h"
#include "models/scenario/param_values.h"

namespace memtwin {

Cluster build_cluster(const ParamValues& v);
GpuSpec build_gpu(const ParamValues& v);
/// The cluster's nodes of another GPU type (a disaggregated side's `gpu`): `cluster` with `gpu` and
/// what follows from it where the scenario does not set it (the intra-node fabric and bandwidth,
/// the host link, the collective library's efficiencies) and that GPU's catalog price. Fails at
/// `key` where cluster.calibration or an efficiency preset describe another GPU.
Cluster cluster_on_gpu(const ParamValues& v, const Cluster& cluster, const GpuSpec& gpu, const std::string& key);
ModelSpec build_model(const ParamValues& v);
Training build_training(const ParamValues& v, const Cluster& cluster, const ModelSpec& model);
Inference build_inference(const ParamValues& v, const Cluster& cluster, const ModelSpec& model);

}  // namespace memtwin
