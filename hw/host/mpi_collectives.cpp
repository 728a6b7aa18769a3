#include "hw/host/mpi_collectives.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <thread>

namespace memtwin::hw {
namespace {
constexpr std::size_t kStagingBytes = std::size_t{8} << 20;

// Polls a request, yielding the core between tests; false when `stop` was raised first.
bool wait(MPI_Request& request, const std::atomic<bool>& stop, const char* call) {
  for (;;) {
    int finished = 0;
    check_mpi(MPI_Test(&request, &finished, MPI_STATUS_IGNORE), call);
    if (finished) return true;
    if (stop) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

int tag_of(const std::string& tag) {
  std::uint32_t h = 2166136261u;
  for (unsigned char c : tag) h = (h ^ c) * 16777619u;
  return static_cast<int>(h % 32000u);
}
}  // namespace

void check_mpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw std::runtime_error(std::string(call) + " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

MpiSession::MpiSession() {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    if (provided < MPI_THREAD_MULTIPLE) {
      throw std::runtime_error("MPI_Init_thread: this MPI library does not provide MPI_THREAD_MULTIPLE, which the "
                               "hardware backend needs (one thread per stream)");
    }
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
}

MpiSession::~MpiSession() {
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (finalised) return;
  if (claim_window_ != MPI_WIN_NULL) MPI_Win_free(&claim_window_);
  MPI_Finalize();
}

void MpiSession::prepare_report_claim() {
  // One rank claims the report without asking anyone; no window then, since a singleton run may
  // have no one-sided (osc) component that can create one (a GPU machine's Open MPI, started
  // without mpirun, answered MPI_ERR_WIN).
  if (claim_window_ != MPI_WIN_NULL || size == 1) return;
  check_mpi(MPI_Win_create(&claim_counter_, sizeof claim_counter_, sizeof claim_counter_, MPI_INFO_NULL, MPI_COMM_WORLD,
                           &claim_window_),
            "MPI_Win_create");
}

bool MpiSession::claim_report() {
  if (size == 1 || claim_window_ == MPI_WIN_NULL) return true;
  long one = 1, before = 0;
  check_mpi(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, claim_window_), "MPI_Win_lock");
  check_mpi(MPI_Fetch_and_op(&one, &before, MPI_LONG, 0, 0, MPI_SUM, claim_window_), "MPI_Fetch_and_op");
  check_mpi(MPI_Win_unlock(0, claim_window_), "MPI_Win_unlock");
  return before == 0;
}

MpiSession& MpiSession::get() {
  static MpiSession session;
  return session;
}

void MpiSession::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

MpiCollectives::MpiCollectives(const Plan& plan, int rank) : plan_(plan), rank_(rank) {
  // One split per role, every rank taking part: its color is its group, its key its ring position.
  for (const auto& [role, groups] : plan.groups) {
    if (role == "pp_next" || role == "pp_prev") continue;  // point to point over the world
    const auto& mine = plan.group_of_rank.at(static_cast<std::size_t>(rank));
    auto it = mine.find(role);
    int color = MPI_UNDEFINED, key = 0;
    if (it != mine.end()) {
      color = it->second;
      const auto& members = groups[static_cast<std::size_t>(it->second)];
      key = static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
    }
    MPI_Comm comm = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm), "MPI_Comm_split");
    if (comm != MPI_COMM_NULL) {
      MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
      comms_[role] = comm;
    }
  }
  staging(Stream::comm);  // resident from the start, as NCCL's buffers are
}

MpiCollectives::~MpiCollectives() {
  for (auto& [role, comm] : comms_) MPI_Comm_free(&comm);
}

std::vector<char>& MpiCollectives::staging(Stream s) {
  std::lock_guard lock(mutex_);
  auto& buffer = staging_[s];
  if (buffer.empty()) buffer.assign(kStagingBytes, 0);
  return buffer;
}

std::int64_t MpiCollectives::staging_bytes() const {
  std::int64_t total = 0;
  for (const auto& [s, b] : staging_) total += static_cast<std::int64_t>(b.size());
  return total;
}

bool MpiCollectives::run(const Op& op, const std::atomic<bool>& stop) {
  char* buffer = staging(op.stream).data();
  const auto total = static_cast<std::int64_t>(op.bytes_total);
  if (op.collective == Collective::p2p_forward || op.collective == Collective::p2p_backward) {
    const auto& pair = plan_.groups.at(op.role).at(static_cast<std::size_t>(plan_.group_of_rank.at(rank_).at(op.role)));
    const int from = op.collective == Collective::p2p_forward ? pair[0] : pair[1];
    const int to = op.collective == Collective::p2p_forward ? pair[1] : pair[0];
    const int tag = tag_of(op.tag);
    for (std::int64_t done = 0; done < total;) {
      const int n = static_cast<int>(std::min<std::int64_t>(total - done, kStagingBytes));
      MPI_Request request;
      if (rank_ == from) {
        check_mpi(MPI_Isend(buffer, n, MPI_BYTE, to, tag, MPI_COMM_WORLD, &request), "MPI_Isend");
        if (!wait(request, stop, "MPI_Isend")) return false;
      } else {
        check_mpi(MPI_Irecv(buffer, n, MPI_BYTE, from, tag, MPI_COMM_WORLD, &request), "MPI_Irecv");
        if (!wait(request, stop, "MPI_Irecv")) return false;
      }
      done += n;
    }
    return true;
  }
  auto found = comms_.find(op.role);
  if (found == comms_.end()) throw std::runtime_error("no communicator for role '" + op.role + "' on rank " + std::to_string(rank_));
  MPI_Comm comm = found->second;
  int n = 1;
  MPI_Comm_size(comm, &n);
  if (n == 1 || total <= 0) return true;
  const std::int64_t floats = total / 4;
  switch (op.collective) {
    case Collective::all_gather: {
      // Each rank contributes total/n bytes; a chunk's share plus the gathered chunk fit the stage.
      const std::int64_t share = (total + n - 1) / n;
      const std::int64_t chunk = static_cast<std::int64_t>(kStagingBytes) / (n + 1);
      for (std::int64_t done = 0; done < share;) {
        const int c = static_cast<int>(std::min(chunk, share - done));
        MPI_Request request;
        check_mpi(MPI_Iallgather(buffer, c, MPI_BYTE, buffer + c, c, MPI_BYTE, comm, &request), "MPI_Iallgather");
        if (!wait(request, stop, "MPI_Iallgather")) return false;
        done += c;
      }
      return true;
    }
    case Collective::reduce_scatter: {
      const std::int64_t block = (floats + n - 1) / n;
      const std::int64_t chunk = static_cast<std::int64_t>(kStagingBytes / sizeof(float)) / (n + 1);
      auto* data = reinterpret_cast<float*>(buffer);
      for (std::int64_t done = 0; done < block;) {
        const int c = static_cast<int>(std::min(chunk, block - done));
        MPI_Request request;
        check_mpi(MPI_Ireduce_scatter_block(data + c, data, c, MPI_FLOAT, MPI_SUM, comm, &request),
                  "MPI_Ireduce_scatter_block");
        if (!wait(request, stop, "MPI_Ireduce_scatter_block")) return false;
        done += c;
      }
      return true;
    }
    case Collective::all_reduce: {
      const std::int64_t chunk = static_cast<std::int64_t>(kStagingBytes / sizeof(float));
      auto* data = reinterpret_cast<float*>(buffer);
      for (std::int64_t done = 0; done < floats;) {
        const int c = static_cast<int>(std::min(chunk, floats - done));
        MPI_Request request;
        check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data, c, MPI_FLOAT, MPI_SUM, comm, &request), "MPI_Iallreduce");
        if (!wait(request, stop, "MPI_Iallreduce")) return false;
        done += c;
      }
      return true;
    }
    case Collective::all_to_all: {
      // Expert parallelism's exchange: bytes_total / n to every member (its own share stays), in
      // chunks whose send and receive sides fit the stage together.
      const std::int64_t share = (total + n - 1) / n;
      const std::int64_t chunk = static_cast<std::int64_t>(kStagingBytes) / (2 * n);
      for (std::int64_t done = 0; done < share;) {
        const int c = static_cast<int>(std::min(chunk, share - done));
        MPI_Request request;
        check_mpi(MPI_Ialltoall(buffer, c, MPI_BYTE, buffer + static_cast<std::ptrdiff_t>(c) * n, c, MPI_BYTE, comm, &request),
                  "MPI_Ialltoall");
        if (!wait(request, stop, "MPI_Ialltoall")) return false;
        done += c;
      }
      return true;
    }
    case Collective::p2p_forward:
    case Collective::p2p_backward: return true;  // handled above
  }
  return true;
}

}  // namespace memtwin::hw
