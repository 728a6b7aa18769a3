#pragma once
// The memory sections of a result (the output contract of `memtwin run`): "memory", and for
// serving "kv_cache"; plus notes for people (largest consumers and hints when it does not fit).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/memory/serving_memory.h"
#include "models/memory/training_memory.h"

namespace memtwin {

void add_training_memory(nlohmann::ordered_json& metrics, std::vector<std::string>& notes, const Scenario& scenario,
                         const TrainingMemory& memory);
void add_serving_memory(nlohmann::ordered_json& metrics, std::vector<std::string>& notes, const Scenario& scenario,
                        const ServingMemory& memory);

}  // namespace memtwin
