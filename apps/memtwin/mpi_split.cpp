#include "apps/memtwin/mpi_split.h"

#include <mpi.h>

#include <cstdlib>
#include <stdexcept>

namespace memtwin::cli {

MpiSplit MpiSplit::from_launcher() {
  MpiSplit split;
  // Open MPI's and MPICH/Hydra's launchers say how many ranks they started.
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!size) size = std::getenv("PMI_SIZE");
  if (!size || std::atoi(size) < 2) return split;
  if (MPI_Init(nullptr, nullptr) != MPI_SUCCESS) throw std::runtime_error("MPI_Init failed");
  split.active = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &split.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &split.size);
  return split;
}

MpiSplit::MpiSplit(MpiSplit&& other) noexcept : active(other.active), rank(other.rank), size(other.size) {
  other.active = false;
}

MpiSplit::~MpiSplit() {
  if (active) MPI_Finalize();
}

void MpiSplit::barrier() const {
  if (active && MPI_Barrier(MPI_COMM_WORLD) != MPI_SUCCESS) throw std::runtime_error("MPI_Barrier failed");
}

}  // namespace memtwin::cli
