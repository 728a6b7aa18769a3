#include "apps/memtwin/rank_launcher.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace memtwin::cli {

bool under_mpi_launcher() { return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE"); }

Launched launch_ranks(int ranks, const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  const std::string self = fs::canonical("/proc/self/exe").string();
  std::vector<std::string> words = {"mpirun", "-np", std::to_string(ranks), "--oversubscribe"};
  if (geteuid() == 0) words.push_back("--allow-run-as-root");
  words.push_back(self);
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);

  char name[] = "/tmp/memtwin-ranks-XXXXXX";
  const int fd = mkstemp(name);
  if (fd < 0) throw std::runtime_error("cannot create a temporary file for the ranks' output");
  close(fd);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, name, O_WRONLY | O_TRUNC, 0600);
  pid_t pid = 0;
  const int failed = posix_spawnp(&pid, "mpirun", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (failed) {
    std::remove(name);
    throw std::runtime_error("cannot start mpirun (Open MPI's launcher; Debian package openmpi-bin)");
  }
  int status = 0;
  waitpid(pid, &status, 0);
  Launched result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(name);
  std::stringstream text;
  text << in.rdbuf();
  result.out = text.str();
  std::remove(name);
  return result;
}

}  // namespace memtwin::cli
