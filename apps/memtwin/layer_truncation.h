#pragma once
// `--layers N`: check a deep model on a small machine by running a training step with N of its L
// layers, and with N0 = max(2 x pipeline stages, N / 2) layers too, so that the hardware backend can
// extrapolate step time and peak memory linearly in depth back to L (hw/hw_backend.h). Both
// shallower scenarios are loaded through the loader with a model.layers override, so every rule of
// the scenario applies to them.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/scenario_loader.h"

namespace memtwin::cli {

struct LayerTruncation {
  LoadedScenario measured;                    ///< N layers: what runs and is reported
  std::shared_ptr<const Scenario> shallower;  ///< N0 layers: measured for the extrapolation
  int full_layers = 0;                        ///< L
};

/// `load` loads the scenario with extra overrides. Throws UsageError when the scenario serves or
/// N is not in (N0, L].
LayerTruncation truncate_layers(const std::function<LoadedScenario(const std::vector<std::string>&)>& load, const Scenario& full,
                                int layers);

}  // namespace memtwin::cli
