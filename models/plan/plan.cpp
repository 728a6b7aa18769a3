#include "models/plan/plan.h"


#include "models/hash.h"

namespace memtwin {

const char* stream_name(Stream s) {
  switch (s) {
    case Stream::compute: return "compute";
    case Stream::comm: return "comm";
    case Stream::copy: return "copy";
    case Stream::send_next: return "send_next";
    case Stream::send_prev: return "send_prev";
    case Stream::recv_next: return "recv_next";
    case Stream::recv_prev: return "recv_prev";
    case Stream::context: return "context";
  }
  return "?";
}

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::all_gather: return "all_gather";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::all_reduce: return "all_reduce";
    case Collective::all_to_all: return "all_to_all";
    case Collective::p2p_forward:
    case Collective::p2p_backward: return "send_recv";
  }
  return "?";
}

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::compute: return "compute";
    case OpKind::collective: return "collective";
    case OpKind::alloc: return "alloc";
    case OpKind::free: return "free";
    case OpKind::copy: return "copy";
  }
  return "?";
}

const char* compute_class_name(ComputeClass c) {
  switch (c) {
    case ComputeClass::gemm: return "gemm";
    case ComputeClass::attention: return "attention";
    case ComputeClass::elementwise: return "elementwise";
    case ComputeClass::cpu_optimizer: return "cpu_optimizer";
  }
  return "?";
}

const char* copy_direction_name(CopyDirection d) {
  switch (d) {
    case CopyDirection::device_to_host: return "device_to_host";
    case CopyDirection::host_to_device: return "host_to_device";
    case CopyDirection::nvme_to_host: return "nvme_to_host";
    case CopyDirection::host_to_nvme: return "host_to_nvme";
  }
  return "?";
}

std::uint64_t Plan::hash() const {
  Fnv1a f;
  for (const auto& p : programs) {
    f.add(p.name);
    for (const auto& op : p.ops) {
      f.add(static_cast<std::int64_t>(op.kind));
      f.add(static_cast<std::int64_t>(op.stream));
      f.add(op.name);
      for (auto d : op.deps) f.add(static_cast<std::int64_t>(d));
      f.add(static_cast<std::int64_t>(op.compute_class));
      f.add(op.flops);
      f.add(op.bytes);
      for (const auto& g : op.gemms) {
        f.add(g.m);
        f.add(g.n);
        f.add(g.k);
        f.add(g.count);
      }
      f.add(static_cast<std::int64_t>(op.collective));
      f.add(op.role);
      f.add(op.bytes_total);
      f.add(op.tag);
      f.add(op.tensor);
      f.add(op.size.count());
      if (op.kind == OpKind::copy) f.add(static_cast<std::int64_t>(op.direction));
    }
  }
  for (int p : program_of_rank) f.add(static_cast<std::int64_t>(p));
  for (const auto& [role, gs] : groups) {
    f.add(role);
    for (const auto& g : gs)
      for (int r : g) f.add(static_cast<std::int64_t>(r));
  }
  f.add(persistent_bytes.count());
  return f.value();
}

std::string Plan::hash_hex() const { return Fnv1a::to_hex(hash()); }

}  // namespace memtwin
