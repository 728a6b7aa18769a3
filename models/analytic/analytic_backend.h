#pragma once
// The `analytic` backend: closed-form estimates (model facts, memory model) with no simulation.
// It is the fast path for sweeps and the reference the simulator must agree with.
#include <memory>

#include "models/backend.h"

namespace memtwin {

std::unique_ptr<Backend> make_analytic_backend();

}  // namespace memtwin
