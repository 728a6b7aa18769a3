#pragma once
// What a sharding strategy (DDP, ZeRO-1/2/3, FSDP's modes) does with a rank's model states during
// a step: which states it shards and over how many GPUs, whether parameters are gathered before
// use and how far ahead, and which communication buffers it keeps allocated. The one place that
// decides it: the closed-form memory model (model_states, training_buffers), the communication
// volume and the training plan (stage_program) ask this instead of re-deriving the strategy.
#include <string>
#include <vector>

#include "models/memory/rank_share.h"
#include "models/scenario.h"
#include "models/units.h"

namespace memtwin {

/// Which states the strategy shards, and over how many GPUs.
struct ShardingLayout {
  int degree = 1;  ///< GPUs a sharded state is split over (data-parallel size, or FSDP's shard group)
  bool optimizer = false;
  bool gradients = false;
  bool parameters = false;
};

ShardingLayout sharding_layout(const Training& training, int data_parallel);

/// ZeRO-3 and FSDP (full or hybrid shard) gather each block's parameters before using them.
bool gathers_parameters(const Training& training);

/// A buffer the strategy allocates once and keeps for the whole step (a framework's gradient or
/// communication bucket). The plan allocates it under `tensor`; the closed form counts `size`.
struct PersistentBuffer {
  std::string tensor;
  Bytes size;
};

struct ShardingDescriptor {
  ShardingLayout layout;
  bool gathers_parameters = false;
  /// Blocks gathered ahead of the one computing (ZeRO-3/FSDP), when `gathers_parameters`.
  int prefetch_blocks = 0;
  /// In backward a gathered block's gradient is produced unsharded and held until its
  /// reduce-scatter finishes (PyTorch FSDP's unsharded gradient of the unit).
  bool unsharded_block_gradient = false;
  std::vector<PersistentBuffer> persistent_buffers;

  [[nodiscard]] Bytes persistent_bytes() const;
};

/// The strategy of `scenario`'s training on a rank holding `share`, with `data_parallel` ranks
/// sharing its weights.
ShardingDescriptor describe_sharding(const Scenario& scenario, const RankShare& share, int data_parallel);

}  // namespace memtwin
