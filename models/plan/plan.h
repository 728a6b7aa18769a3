#pragma once
// The Plan: the backend-neutral op graph both the simulator and the hardware backend execute, so
// that their results are comparable by construction (compare ASTRA-sim's Chakra traces).
//
// Every rank runs a Program: ops in issue order, each on one stream (compute, communication,
// copy), each waiting for its dependencies (indices of earlier ops of the same rank) before it
// starts. Streams run their ops in order, concurrently with each other. Collectives name a
// communicator role ("dp", "tp"); the plan maps each rank's roles to concrete groups, so data-parallel
// ranks share one program. Memory is explicit: alloc and free ops carry tensor names and bytes, so
// a backend's accounting allocator sees every byte the memory model counts.
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/units.h"

namespace memtwin {

/// Pipeline sends and receives run on their own streams, one per neighbour and direction, as
/// NCCL's batched isend/irecv do: a send then never waits behind a receive from the same peer.
/// Context parallelism's key/value exchange has its own stream too (Transformer Engine's), so it
/// never queues behind the data-parallel gathers and reductions.
enum class Stream { compute, comm, copy, send_next, send_prev, recv_next, recv_prev, context };
enum class OpKind { compute, collective, alloc, free, copy };
enum class ComputeClass { gemm, attention, elementwise, cpu_optimizer };
/// p2p_forward sends from the pair group's first rank to its second (activations down the
/// pipeline); p2p_backward the other way (their gradients).
/// all_to_all: expert parallelism's token exchange; every member sends `bytes_total / n` to each
/// other member (`bytes_total` is one member's buffer).
enum class Collective { all_gather, reduce_scatter, all_reduce, p2p_forward, p2p_backward, all_to_all };
/// Copies over a GPU's PCIe link, and reads/writes between host memory and the node's NVMe.
enum class CopyDirection { device_to_host, host_to_device, nvme_to_host, host_to_nvme };

const char* stream_name(Stream s);
const char* collective_name(Collective c);
const char* op_kind_name(OpKind k);
const char* compute_class_name(ComputeClass c);
const char* copy_direction_name(CopyDirection d);

/// One matrix multiply C[m,n] = A[m,k] B[k,n], `count` times: the real shapes of a compute op, so
/// that a hardware backend runs the kernels the model has. The op's `flops` stay authoritative: a
/// backward pass carries its input- and weight-gradient shapes, causal attention runs half of its
/// full shapes.
struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t count = 1;
  [[nodiscard]] double flops() const { return 2.0 * static_cast<double>(m) * n * k * count; }
};

struct Op {
  OpKind kind = OpKind::compute;
  Stream stream = Stream::compute;
  std::string name;                 ///< for traces: "fwd.block3", "ag.block3", ...
  std::vector<std::uint32_t> deps;  ///< earlier ops of this rank that must finish first
  // compute
  ComputeClass compute_class = ComputeClass::gemm;
  double flops = 0;                 ///< floating-point operations (cpu_optimizer: parameters to update)
  double bytes = 0;                 ///< device-memory traffic, for the roofline
  std::vector<GemmShape> gemms;     ///< gemm and attention ops: the shapes one pass multiplies
  // collective: `bytes_total` is the full buffer (the gathered output of an all-gather, the input of
  // a reduce-scatter, the buffer of an all-reduce), as nccl-tests counts it.
  Collective collective = Collective::all_reduce;
  std::string role;                 ///< communicator role, e.g. "dp", "tp", "pp_next", "pp_prev"
  double bytes_total = 0;
  /// Matches the ops of different programs that form one collective (a pipeline send and its
  /// receive); empty when every member runs the same program and the op index matches them.
  std::string tag;
  // alloc / free: a named device tensor
  std::string tensor;
  Bytes size;
  // copy over PCIe, or to/from the node's NVMe
  CopyDirection direction = CopyDirection::device_to_host;
};

/// The GEMMs a backend runs for a gemm or attention op: its shapes, their counts scaled so that
/// they perform the op's FLOPs (a backward twice its forward's, causal attention half its full
/// products). Empty when the op carries no shapes (a backend treats it as memory-bound). Inline: the
/// CUDA device module uses it without linking the models.
inline std::vector<GemmShape> gemms_for_op_flops(const Op& op) {
  double pass = 0;
  for (const auto& g : op.gemms) pass += g.flops();
  if (pass <= 0) return {};
  std::vector<GemmShape> scaled = op.gemms;
  for (auto& g : scaled) g.count = std::llround(static_cast<double>(g.count) * op.flops / pass);
  return scaled;
}

/// One program shared by every rank of a kind (all data-parallel ranks of a stage, say).
struct Program {
  std::string name;
  std::vector<Op> ops;
};

/// Resident bytes of one op with its GEMM shapes and names (measured: a 9 M-op plan held 5.5 GB),
/// for bounding a plan before it is built and estimating a simulation's memory.
inline constexpr double kPlanBytesPerOp = 600;

struct Plan {
  std::vector<Program> programs;
  std::vector<int> program_of_rank;                           ///< rank -> programs index
  std::map<std::string, std::vector<std::vector<int>>> groups; ///< role -> its groups of ranks
  ///< ("pp_next" and "pp_prev" hold the same pairs of consecutive pipeline stages, named from
  ///< either end)
  std::vector<std::map<std::string, int>> group_of_rank;      ///< rank -> role -> index into groups[role]
  Bytes persistent_bytes;  ///< model states, runtime and the sharding strategy's buckets every rank holds before the first op
  std::string description;

  [[nodiscard]] int ranks() const { return static_cast<int>(program_of_rank.size()); }
  /// A stable hash of everything a backend executes (FNV-1a over a canonical text form).
  [[nodiscard]] std::uint64_t hash() const;
  /// The hash as 16 hex digits, as results print it (`simulated.plan_hash`, `executed.plan_hash`).
  [[nodiscard]] std::string hash_hex() const;
};

}  // namespace memtwin
