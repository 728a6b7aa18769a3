// Checks memtwin's training memory model against peaks measured on an H200 with PyTorch
// (tests/data/h200_torch_training.json, written by scripts/gpu/probe.sh): a 0.89B Llama trained
// with torch.autocast(bf16) and fused AdamW on one GPU. The tolerance is what the model achieves
// today, printed case by case; tightening it is the job of calibration (the hardware issue).
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "models/memory/training_memory.h"
#include "models/model_facts.h"
#include "models/scenario_loader.h"
#include "tests/test_support.h"

using namespace memtwin;

TEST_CASE("training peaks measured with PyTorch on an H200", "[validation]") {
  std::ifstream in(test::source_path("tests/data/h200_torch_training.json"));
  REQUIRE(in.good());
  const auto measured = nlohmann::json::parse(in);
  const std::string scenario = test::source_path("scenarios/validation/torch-llama-0.9b-h200.yaml");

  Scenario base = load_scenario_file(scenario).scenario;
  // The measured model is the scenario's model.
  CHECK(measured["parameters"].get<double>() == count_parameters(base.model).total);
  for (const auto& run : measured["runs"]) {
    const int mb = run["micro_batch"], seq = run["seq_len"];
    const bool ckpt = run["checkpointing"];
    Scenario s = load_scenario_file(scenario, {"training.micro_batch=" + std::to_string(mb),
                                               "training.seq_len=" + std::to_string(seq),
                                               std::string("training.activation_checkpointing=") + (ckpt ? "full" : "none")})
                     .scenario;
    const TrainingMemory m = training_memory(s);
    // PyTorch's max_memory_allocated counts tensors only: no context, NCCL or allocator waste.
    const double predicted = (m.peak - m.runtime - m.fragmentation).as_double();
    const double actual = run["peak_allocated_bytes"];
    const double error = (predicted - actual) / actual;
    WARN("micro_batch " << mb << " seq " << seq << (ckpt ? " full recompute" : " no recompute") << ": predicted "
                        << predicted / 1e9 << " GB, measured " << actual / 1e9 << " GB, error " << 100 * error << "%");
    CHECK(std::fabs(error) < 0.25);
  }
}
