#include "hw/host/mpi_serving_group.h"

#include <limits>
#include <stdexcept>

#include "hw/host/mpi_collectives.h"

namespace memtwin::hw {

MpiServingGroup::MpiServingGroup() {
  MpiSession& mpi = MpiSession::get();
  rank_ = mpi.rank;
  size_ = mpi.size;
}

std::vector<std::int64_t> MpiServingGroup::all_gather(const std::vector<std::int64_t>& mine) {
  std::vector<std::int64_t> all(mine.size() * static_cast<std::size_t>(size_));
  check_mpi(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(), static_cast<int>(mine.size()),
                          MPI_INT64_T, MPI_COMM_WORLD),
            "MPI_Allgather");
  return all;
}

void MpiServingGroup::layout(const std::vector<int>& rows, int width) {
  if (rows.size() != static_cast<std::size_t>(size_)) throw std::logic_error("serving group: a row count per rank");
  counts_.resize(rows.size());
  offsets_.resize(rows.size());
  std::int64_t at = 0;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const std::int64_t count = static_cast<std::int64_t>(rows[r]) * width;
    if (at + count > std::numeric_limits<int>::max()) throw std::runtime_error("serving group: an exchange beyond MPI's int counts");
    counts_[r] = static_cast<int>(count);
    offsets_[r] = static_cast<int>(at);
    at += count;
  }
}

void MpiServingGroup::all_gather_rows(const float* mine, float* all, const std::vector<int>& rows, int width) {
  layout(rows, width);
  check_mpi(MPI_Allgatherv(mine, counts_[static_cast<std::size_t>(rank_)], MPI_FLOAT, all, counts_.data(), offsets_.data(),
                           MPI_FLOAT, MPI_COMM_WORLD),
            "MPI_Allgatherv");
}

void MpiServingGroup::reduce_scatter_add(const float* all, float* mine, const std::vector<int>& rows, int width) {
  layout(rows, width);
  const int own = counts_[static_cast<std::size_t>(rank_)];
  received_.resize(static_cast<std::size_t>(own));
  check_mpi(MPI_Reduce_scatter(all, received_.data(), counts_.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Reduce_scatter");
  for (int i = 0; i < own; ++i) mine[i] += received_[static_cast<std::size_t>(i)];
}

std::vector<std::string> MpiServingGroup::gather_to_first(const std::string& text) {
  const int length = static_cast<int>(text.size());
  std::vector<int> lengths(static_cast<std::size_t>(size_)), offsets(static_cast<std::size_t>(size_));
  check_mpi(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather");
  std::int64_t total = 0;
  for (int r = 0; r < size_; ++r) {
    offsets[static_cast<std::size_t>(r)] = static_cast<int>(total);
    total += lengths[static_cast<std::size_t>(r)];
  }
  if (total > std::numeric_limits<int>::max()) throw std::runtime_error("serving group: results beyond MPI's int counts");
  std::string joined(rank_ == 0 ? static_cast<std::size_t>(total) : 0, '\0');
  check_mpi(MPI_Gatherv(text.data(), length, MPI_CHAR, joined.data(), lengths.data(), offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD),
            "MPI_Gatherv");
  std::vector<std::string> out;
  if (rank_ != 0) return out;
  for (int r = 0; r < size_; ++r) {
    out.push_back(joined.substr(static_cast<std::size_t>(offsets[static_cast<std::size_t>(r)]),
                                static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)])));
  }
  return out;
}

}  // namespace memtwin::hw
