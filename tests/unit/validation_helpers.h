#pragma once
// What the validation tests share: the check that a case's stored error (the one prediction
// intervals are built from, scenarios/presets/validated-errors.yaml) still matches a fresh run, and
// is filed under the kind the scenario has.
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "models/enums.h"
#include "models/scenario_loader.h"
#include "models/validation/prediction_interval.h"
#include "tests/test_support.h"

namespace memtwin::test {

// Megatron-LM (Narayanan et al., SC'21) reports achieved TFLOP/s per GPU, counted with its eq. (3):
// F = 96 B s l h^2 (1 + s/6h + V/16lh) per iteration (full recompute included; sequence 2048,
// vocabulary 51200 in every row); the published iteration time is F / (GPUs x TFLOP/s).
struct MegatronRow {
  double batch, layers, hidden, gpus, tflops_per_gpu;
  [[nodiscard]] double iteration_s() const {
    const double s = 2048, vocab = 51200;
    const double flops = 96 * batch * s * layers * hidden * hidden *
                         (1 + s / (6 * hidden) + vocab / (16 * layers * hidden));
    return flops / (gpus * tflops_per_gpu * 1e12);
  }
};

inline void check_residual(const std::string& label, const std::string& set, const std::string& file,
                           const std::vector<std::string>& sets, double error) {
  INFO(label << ": refresh its entry in scenarios/presets/validated-errors.yaml (error " << error << ")");
  const ValidatedCase* stored = nullptr;
  for (const auto& c : validated_cases()) {
    if (c.label == label) stored = &c;
  }
  REQUIRE(stored != nullptr);
  const Scenario s = load_scenario_file(source_path(file), sets).scenario;
  CHECK(stored->set == set);
  CHECK(stored->scenario == std::filesystem::path(file).stem().string());
  CHECK(stored->generation == std::string(kGpuGenerationNames.name(*s.cluster.gpu.generation)));
  CHECK(stored->parallelism == parallelism_class(*s.training));
  CHECK(stored->gpus == s.cluster.total_gpus());
  CHECK(std::fabs(stored->error - error) <= 0.01);
}

}  // namespace memtwin::test
