#pragma once
// The `sim` backend: builds the scenario's Plan and simulates one training step on SimGrid.
#include <memory>

#include "models/backend.h"

namespace memtwin {

std::unique_ptr<Backend> make_sim_backend();

}  // namespace memtwin
