#pragma once
// The host device's collectives over MPI (Open MPI: shared memory between the ranks of one
// machine, the network between machines). One communicator per role group (MPI_Comm_split), in
// the plan's ring order; pipeline sends and receives go point to point, matched by the op's tag.
// Like NCCL, a collective moves its buffer through fixed staging buffers in chunks, so the
// process's memory does not grow with the message (the analogue of `nccl_buffers`). Reductions are
// real fp32 sums. Calls are nonblocking and polled, so a waiting rank leaves its core to compute,
// and a step being abandoned (out of memory elsewhere) is not stuck in a call.
//
// Contract: construct once per process after MpiSession; every rank of the plan must construct it
// (the communicator splits are collective). Errors throw std::runtime_error naming the MPI call.
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <mpi.h>

#include "hw/device.h"

namespace memtwin::hw {

/// MPI for the process, initialised once with MPI_THREAD_MULTIPLE (every stream of the plan may
/// call it) and finalised at exit.
class MpiSession {
 public:
  static MpiSession& get();
  int rank = 0, size = 1;
  /// Stops every rank (after a rank ran out of memory or failed: the others would wait forever).
  [[noreturn]] void abort(int code) const;
  /// Collective, before the ranks can fail: a counter on rank 0 that `claim_report` increments.
  void prepare_report_claim();
  /// True for exactly one of the ranks that call it (the first), without the other ranks taking
  /// part: the rank that reports a failure while the others may be waiting in a collective.
  bool claim_report();
  ~MpiSession();
 private:
  MpiSession();
  MPI_Win claim_window_ = MPI_WIN_NULL;
  long claim_counter_ = 0;
};

/// Throws naming `call` when `code` is not MPI_SUCCESS.
void check_mpi(int code, const char* call);

class MpiCollectives final : public Collectives {
 public:
  MpiCollectives(const Plan& plan, int rank);
  ~MpiCollectives() override;
  bool run(const Op& op, const std::atomic<bool>& stop) override;

  /// Bytes of staging buffers held (resident), for the runtime overhead.
  [[nodiscard]] std::int64_t staging_bytes() const;

 private:
  std::vector<char>& staging(Stream s);
  const Plan& plan_;
  int rank_;
  std::map<std::string, MPI_Comm> comms_;  ///< role -> this rank's group
  std::mutex mutex_;
  std::map<Stream, std::vector<char>> staging_;
};

}  // namespace memtwin::hw
