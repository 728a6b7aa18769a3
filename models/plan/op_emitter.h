#pragma once
// Appending ops to a program: the stage programs' builder (stage_program.cpp) writes every op
// through this, so an op's fields are set in one place.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/plan/plan.h"

namespace memtwin {

// Appends ops to one program and hands back their indices.
class Emitter {
 public:
  explicit Emitter(Program& p) : p_(p) {}
  std::uint32_t add(Op op) {
    p_.ops.push_back(std::move(op));
    return static_cast<std::uint32_t>(p_.ops.size() - 1);
  }
  std::uint32_t compute(std::string name, ComputeClass c, double flops, double bytes, std::vector<std::uint32_t> deps,
                        std::vector<GemmShape> gemms = {}) {
    Op op;
    op.name = std::move(name);
    op.compute_class = c;
    op.flops = flops;
    op.bytes = bytes;
    op.deps = std::move(deps);
    op.gemms = std::move(gemms);
    return add(std::move(op));
  }
  std::uint32_t collective(std::string name, Collective c, std::string role, double bytes_total,
                           std::vector<std::uint32_t> deps, std::string tag = {}, Stream stream = Stream::comm) {
    Op op;
    op.kind = OpKind::collective;
    op.stream = stream;
    op.name = std::move(name);
    op.collective = c;
    op.role = std::move(role);
    op.bytes_total = bytes_total;
    op.tag = std::move(tag);
    op.deps = std::move(deps);
    return add(std::move(op));
  }
  std::uint32_t memory(OpKind kind, std::string tensor, Bytes size, std::vector<std::uint32_t> deps,
                       Stream s = Stream::compute) {
    Op op;
    op.kind = kind;
    op.stream = s;
    op.name = (kind == OpKind::alloc ? "alloc." : "free.") + tensor;
    op.tensor = std::move(tensor);
    op.size = size;
    op.deps = std::move(deps);
    return add(std::move(op));
  }
  std::uint32_t copy(std::string name, CopyDirection d, double bytes, std::vector<std::uint32_t> deps) {
    Op op;
    op.kind = OpKind::copy;
    op.stream = Stream::copy;
    op.name = std::move(name);
    op.direction = d;
    op.bytes = bytes;
    op.deps = std::move(deps);
    return add(std::move(op));
  }

 private:
  Program& p_;
};

}  // namespace memtwin
