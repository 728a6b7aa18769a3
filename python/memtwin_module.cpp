// The Python module `memtwin`: scenarios checked and run from a notebook or a script, on the same
// C++ library as the command line, results as the `memtwin.result/1` document (a dict).
//   import memtwin
//   memtwin.check("scenario.yaml", set=["training.micro_batch=4"])   -> the resolved scenario
//   memtwin.run("scenario.yaml", backend="sim")                      -> the result document
// A scenario is a path or a dict (the scenario's keys, as the YAML would hold them). Bad input
// raises ValueError with the command line's message (file, line and key); a feature a backend
// cannot run raises NotImplementedError.
//
// SimGrid runs one simulation per process, so `run` on the simulator forks: the child simulates
// and sends the document back through a pipe, the parent (the Python process) waits without the
// GIL. The analytic backend runs in the process itself.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "models/analytic/analytic_backend.h"
#include "models/backend.h"
#include "models/result.h"
#include "models/scenario/scenario_error.h"
#include "models/scenario_loader.h"
#include "sim/sim_backend.h"

namespace py = pybind11;

namespace memtwin::python {
namespace {

// A Python error type chosen in C++ (and carried through the simulator's child process as a tag).
enum class Failure : char { none = 'J', bad_input = 'V', unsupported = 'N', internal = 'R' };

py::object json_to_python(const std::string& text) { return py::module_::import("json").attr("loads")(text); }

[[noreturn]] void raise(Failure f, const std::string& message) {
  switch (f) {
    case Failure::bad_input: throw py::value_error(message);
    case Failure::unsupported: {
      PyErr_SetString(PyExc_NotImplementedError, message.c_str());
      throw py::error_already_set();
    }
    default: throw std::runtime_error(message);
  }
}

LoadedScenario load(const py::object& scenario, const std::vector<std::string>& overrides) {
  if (py::isinstance<py::dict>(scenario)) {
    // JSON is YAML: the dict's text loads as a scenario written inline; relative paths in it
    // (traces, calibrations) resolve against the working directory.
    const std::string text = py::module_::import("json").attr("dumps")(scenario).cast<std::string>();
    return load_scenario_text(text, "<dict>", ".", overrides);
  }
  const std::string path = py::str(py::module_::import("os").attr("fspath")(scenario)).cast<std::string>();
  return load_scenario_file(path, overrides);
}

// Runs `what`, turning memtwin's exceptions into a tagged message (so that the child process of
// a simulation can hand them to the parent as they are).
template <class F>
std::pair<Failure, std::string> guarded(F&& what) {
  try {
    return {Failure::none, what()};
  } catch (const ScenarioError& e) {
    return {Failure::bad_input, e.what()};
  } catch (const Unsupported& e) {
    return {Failure::unsupported, e.what()};
  } catch (const std::invalid_argument& e) {
    return {Failure::bad_input, e.what()};
  } catch (const std::exception& e) {
    return {Failure::internal, std::string("internal error: ") + e.what()};
  }
}

std::string run_document(const LoadedScenario& loaded, const std::string& backend) {
  auto b = backend == "sim" ? make_sim_backend() : make_analytic_backend();
  return result_document(loaded, b->run(loaded.scenario)).dump();
}

// The simulation in a child process: one byte of Failure, then the document or the message.
std::pair<Failure, std::string> run_in_child(const LoadedScenario& loaded, const std::string& backend) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error(std::string("memtwin.run: pipe: ") + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("memtwin.run: fork: ") + std::strerror(errno));
  if (pid == 0) {
    close(fds[0]);
    auto [failure, text] = guarded([&] { return run_document(loaded, backend); });
    const std::string message = static_cast<char>(failure) + text;
    for (std::size_t done = 0; done < message.size();) {
      const ssize_t n = write(fds[1], message.data() + done, message.size() - done);
      if (n <= 0) _exit(1);
      done += static_cast<std::size_t>(n);
    }
    _exit(0);  // no Python, no static destructors of the parent's state
  }
  close(fds[1]);
  std::string received;
  int status = 0;
  {
    py::gil_scoped_release unlocked;
    char buffer[1 << 16];
    for (ssize_t n; (n = read(fds[0], buffer, sizeof buffer)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      received.append(buffer, static_cast<std::size_t>(n));
    }
    close(fds[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (received.empty() || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error("memtwin.run: the simulation's process ended without a result (" +
                             (WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status)) : "exit " + std::to_string(WEXITSTATUS(status))) + ")");
  }
  return {static_cast<Failure>(received[0]), received.substr(1)};
}

py::object check(const py::object& scenario, const std::vector<std::string>& set) {
  auto [failure, text] = guarded([&] { return load(scenario, set).resolved.dump(); });
  if (failure != Failure::none) raise(failure, text);
  return json_to_python(text);
}

py::object run(const py::object& scenario, const std::vector<std::string>& set, const std::string& backend) {
  if (backend != "sim" && backend != "analytic") {
    throw py::value_error("memtwin.run: backend '" + backend + "' is not one of sim, analytic (the hardware backend runs from the "
                          "command line: memtwin run --backend hw)");
  }
  std::optional<LoadedScenario> loaded;
  auto [load_failure, load_text] = guarded([&] {
    loaded = load(scenario, set);
    return std::string();
  });
  if (load_failure != Failure::none) raise(load_failure, load_text);
  auto [failure, text] = backend == "sim" ? run_in_child(*loaded, backend) : guarded([&] { return run_document(*loaded, backend); });
  if (failure != Failure::none) raise(failure, text);
  return json_to_python(text);
}

}  // namespace
}  // namespace memtwin::python

PYBIND11_MODULE(memtwin, m) {
  m.doc() = "memtwin: memory and time of LLM training and serving, predicted from a scenario";
  m.attr("__version__") = MEMTWIN_VERSION;
  m.attr("RESULT_SCHEMA") = memtwin::kResultSchema;
  m.def("check", &memtwin::python::check, py::arg("scenario"), py::kw_only(), py::arg("set") = std::vector<std::string>{},
        "Validates a scenario (a path or a dict) with overrides ('key.path=value') and returns it resolved: presets "
        "and defaults filled in. Raises ValueError naming the file, line and key of what is wrong.");
  m.def("run", &memtwin::python::run, py::arg("scenario"), py::kw_only(), py::arg("set") = std::vector<std::string>{},
        py::arg("backend") = "sim",
        "Runs a scenario (a path or a dict) on the simulator ('sim', in a child process) or the closed forms "
        "('analytic') and returns the memtwin.result/1 document as a dict (memory.fits is False when it does not fit).");
}
