#pragma once
// Where a run ran out of device memory, in the one shape every backend reports it
// (memory.gpu.out_of_memory): the simulator from its simulated allocator, the hardware backend from
// the device's caching allocator.
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace memtwin {

struct OutOfMemoryReport {
  int rank = 0;
  std::string op;      ///< the plan op that allocated (training), "serving iteration" (serving)
  std::string tensor;  ///< what was being allocated
  std::int64_t requested = 0;  ///< bytes asked for
  std::int64_t in_use = 0;     ///< bytes held at that moment (the hardware allocator's reserved bytes)
  std::int64_t capacity = 0;   ///< the device's memory
  std::optional<double> at_s;                   ///< when: simulated seconds into the step (the simulator)
  std::optional<std::int64_t> iterations_done;  ///< serving: iterations that completed before it

  /// {rank, op, tensor, requested_bytes, in_use_bytes, free_bytes, capacity_bytes[, at_s][, iterations_done]}
  [[nodiscard]] nlohmann::ordered_json to_json() const {
    nlohmann::ordered_json j = {{"rank", rank},
                                {"op", op},
                                {"tensor", tensor},
                                {"requested_bytes", requested},
                                {"in_use_bytes", in_use},
                                {"free_bytes", capacity - in_use},
                                {"capacity_bytes", capacity}};
    if (at_s) j["at_s"] = *at_s;
    if (iterations_done) j["iterations_done"] = *iterations_done;
    return j;
  }
};

}  // namespace memtwin
