#pragma once
// A sweep started by an MPI launcher (mpirun -np K memtwin sweep ...) splits its points over the
// ranks. MPI is initialised only when the launcher says there are several ranks, so a plain
// `memtwin sweep` never touches it.
namespace memtwin::cli {

class MpiSplit {
 public:
  static MpiSplit from_launcher();
  ~MpiSplit();
  MpiSplit(MpiSplit&& other) noexcept;
  MpiSplit(const MpiSplit&) = delete;
  MpiSplit& operator=(const MpiSplit&) = delete;
  MpiSplit& operator=(MpiSplit&&) = delete;
  void barrier() const;

  bool active = false;
  int rank = 0;
  int size = 1;

 private:
  MpiSplit() = default;
};

}  // namespace memtwin::cli
