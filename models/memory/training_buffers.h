#pragma once
// Transient buffers of a training step that are neither model states nor activations: gathered
// parameters in flight (ZeRO-3 / FSDP units and prefetch), gradient and communication buckets, and
// pipeline send/receive buffers. Each framework's real mechanism and defaults are modelled.
#include "models/memory/model_states.h"
#include "models/memory/rank_share.h"
#include "models/scenario.h"
#include "models/units.h"

namespace memtwin {

Bytes training_buffers(const Scenario& scenario, const RankShare& share);

/// How many NCCL communicators each GPU is a member of (data, tensor, pipeline, expert groups; a
/// hybrid-sharded job has an intra- and an inter-group).
int communicators_per_gpu(const Scenario& scenario);

}  // namespace memtwin
