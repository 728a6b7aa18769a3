#include "apps/memtwin/layer_truncation.h"

#include <algorithm>

#include "apps/memtwin/commands.h"

namespace memtwin::cli {

LayerTruncation truncate_layers(const std::function<LoadedScenario(const std::vector<std::string>&)>& load, const Scenario& full,
                                int layers) {
  if (!full.training) {
    throw UsageError("--layers scales a training step; a serving run's latencies under load do not scale with depth "
                     "(set model.layers to serve a shallower model)");
  }
  const int total = full.model.layers;
  const int stages = full.training->parallelism.pipeline;
  // Two layers per stage at least: the first block of a stage is not like the others (ZeRO-3
  // prefetches the next block's parameters, pipelines hand activations on), so one-layer stages
  // would bend the line.
  const int shallower = std::max(2 * stages, layers / 2);
  if (layers > total || shallower >= layers) {
    throw UsageError("--layers must be more than " + std::to_string(2 * stages) + " (two layers per pipeline stage are measured too) and at most the model's " +
                     std::to_string(total) + " layers, got " + std::to_string(layers));
  }
  LayerTruncation t;
  t.full_layers = total;
  t.measured = load({"model.layers=" + std::to_string(layers)});
  t.shallower = std::make_shared<const Scenario>(load({"model.layers=" + std::to_string(shallower)}).scenario);
  return t;
}

}  // namespace memtwin::cli
