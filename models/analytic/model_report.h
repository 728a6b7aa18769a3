#pragma once
// The "model" section of a result: parameter counts, FLOPs per token, KV bytes per token.
#include <nlohmann/json.hpp>

#include "models/scenario.h"

namespace memtwin {

nlohmann::ordered_json model_report(const Scenario& scenario);

}  // namespace memtwin
