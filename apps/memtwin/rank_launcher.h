#pragma once
// Starting this executable as several MPI ranks (Open MPI's mpirun), for the commands that need a
// multi-process run but should not make the user type the launcher: validate and calibrate.
#include <string>
#include <vector>

namespace memtwin::cli {

/// True when this process was itself started by an MPI launcher.
bool under_mpi_launcher();

struct Launched {
  int exit_code = 0;
  std::string out;  ///< the ranks' standard output (only rank 0 writes to it); stderr passes through
};

/// Runs `memtwin ARGS...` as `ranks` MPI processes on this machine and waits for them. As root it
/// passes the flag Open MPI asks for. Throws std::runtime_error when mpirun cannot be started.
Launched launch_ranks(int ranks, const std::vector<std::string>& args);

}  // namespace memtwin::cli
