#include "models/plan/stage_program.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "models/memory/model_states.h"
#include "models/memory/training_buffers.h"
#include "models/memory/rank_share.h"
#include "models/memory/sharding_strategy.h"
#include "models/model_facts.h"
#include "models/plan/block_cost.h"
#include "models/plan/op_emitter.h"

namespace memtwin {

struct StageProgramBuilder::Impl {
  Impl(const Scenario& sc, const StageSpec& sp, Program& program)
      : s(sc), t(*sc.training), m(sc.model), spec(sp), e(program), block(block_cost(sc)),
        share(rank_share(sc.model, t)), sharding(describe_sharding(sc, share, sp.dp_ranks)), layout(sharding.layout) {
    element = t.precision == Precision::fp32 ? 4 : 2;
    tokens = tokens_per_rank(t);
    tp = t.parallelism.tensor;
    gather = sharding.gathers_parameters;
    prefetch = sharding.prefetch_blocks;
    shard_role = spec.hybrid ? "shard" : "dp";
    const ParameterCount count = count_parameters(m);
    const double head = (m.tied_embeddings ? count.embedding : count.lm_head) / tp;
    root_params = (spec.has_embedding ? (count.embedding + count.position) / tp : 0) +
                  (spec.has_head ? head + count.final_norm : 0);
    head_params = spec.has_head ? head : 0;
    free_gather_fwd.assign(spec.layers, 0);
    free_gather_bwd.assign(spec.layers, 0);
  }

  std::uint32_t tp_collectives(const std::string& where, std::uint32_t dep) {
    if (tp == 1) return dep;
    const double buffer = tokens * m.hidden * element;
    std::uint32_t last = dep;
    for (const char* part : {"attn", "mlp"}) {
      if (t.parallelism.sequence_parallel) {
        last = e.collective(where + ".tp_rs." + part, Collective::reduce_scatter, "tp", buffer, {last});
        last = e.collective(where + ".tp_ag." + part, Collective::all_gather, "tp", buffer, {last});
      } else {
        last = e.collective(where + ".tp_ar." + part, Collective::all_reduce, "tp", buffer, {last});
      }
    }
    return last;
  }

  // ZeRO-Infinity with parameters on NVMe: before a block's all-gather, this rank's shard is read
  // from the node's NVMe into host memory and copied to the device (on the copy stream, so it
  // overlaps compute as far as the gather prefetch allows). Returns what the gather waits for.
  std::uint32_t fetch_shard_from_nvme(const std::string& name, std::uint32_t after) {
    if (t.offload.parameters != OffloadTarget::nvme) return after;
    const double shard = block.params * element / layout.degree;
    const auto read = e.copy(name + ".params_from_nvme", CopyDirection::nvme_to_host, shard, {after});
    return e.copy(name + ".params_to_device", CopyDirection::host_to_device, shard, {read});
  }

  // Expert parameters kept apart from the data-parallel group's: several replicas hold the same
  // experts ("edp" has two or more members), which reduce and gather them among themselves.
  bool experts_shared() const { return block.expert_params > 0 && spec.dp_ranks / t.parallelism.expert >= 2; }

  // ZeRO-3/FSDP: a block's parameters gathered before use; with expert parallelism the experts
  // come from the replicas holding the same experts, the rest from the shard group. Appends what
  // the block's compute waits for to `deps`.
  void gather_block(const std::string& name, std::uint32_t after, std::vector<std::uint32_t>& deps) {
    deps.push_back(e.collective(name, Collective::all_gather, shard_role, (block.params - block.expert_params) * element,
                                {after}));
    if (experts_shared()) {
      deps.push_back(e.collective(name + ".experts", Collective::all_gather, "edp", block.expert_params * element, {after}));
    }
  }

  // Context parallelism as Llama 3 runs it: the block's keys and values all-gathered over the
  // context ranks before attention (into a buffer freed after it); backward gathers them again and
  // reduce-scatters their gradients, which the block's remaining backward waits for.
  std::uint32_t gather_context_kv(const std::string& where, std::uint32_t dep) {
    if (block.context_kv_bytes <= 0) return dep;
    const auto a = e.memory(OpKind::alloc, where + ".kv_gathered", ceil_bytes(block.context_kv_bytes), {dep});
    return e.collective(where + ".cp_ag", Collective::all_gather, "cp", block.context_kv_bytes, {a}, {}, Stream::context);
  }
  std::uint32_t release_context_kv(const std::string& where, std::uint32_t dep, bool reduce_gradients) {
    if (block.context_kv_bytes <= 0) return dep;
    if (reduce_gradients) {
      dep = e.collective(where + ".cp_rs", Collective::reduce_scatter, "cp", block.context_kv_bytes, {dep}, {}, Stream::context);
    }
    return e.memory(OpKind::free, where + ".kv_gathered", ceil_bytes(block.context_kv_bytes), {dep});
  }

  // Expert parallelism's token exchange around the experts: dispatch, then combine.
  std::uint32_t moe_exchange(const std::string& where, std::uint32_t dep) {
    if (block.dispatch_bytes <= 0) return dep;
    const auto dispatch = e.collective(where + ".ep_dispatch", Collective::all_to_all, "ep", block.dispatch_bytes, {dep});
    return e.collective(where + ".ep_combine", Collective::all_to_all, "ep", block.dispatch_bytes, {dispatch});
  }

  // A block's gradients: the experts' over the replicas holding the same experts ("edp"), the
  // rest over the data-parallel group.
  void reduce_block_gradients(const std::string& name, std::uint32_t after) {
    reduce_gradients(name, block.params - block.expert_params, after);
    if (experts_shared()) {
      const double bytes = block.expert_params * element;
      reductions.push_back(layout.optimizer
                               ? e.collective(name + ".experts.grad_rs", Collective::reduce_scatter, "edp", bytes, {after})
                               : e.collective(name + ".experts.grad_ar", Collective::all_reduce, "edp", bytes, {after}));
    }
  }

  void reduce_gradients(const std::string& name, double params, std::uint32_t after) {
    if (spec.dp_ranks < 2 || params <= 0) return;
    const double grad_bytes = params * element;
    if (layout.gradients || gather) {
      const auto rs = e.collective(name + ".grad_rs", Collective::reduce_scatter, shard_role, grad_bytes, {after});
      reductions.push_back(rs);
      if (spec.hybrid) {
        reductions.push_back(e.collective(name + ".grad_ar_replicas", Collective::all_reduce, "replica",
                                          grad_bytes / layout.degree, {rs}));
      }
    } else if (layout.optimizer) {
      reductions.push_back(e.collective(name + ".grad_rs", Collective::reduce_scatter, "dp", grad_bytes, {after}));
    } else {
      reductions.push_back(e.collective(name + ".grad_ar", Collective::all_reduce, "dp", grad_bytes, {after}));
    }
  }

  double boundary_bytes() const {
    return tokens * m.hidden * element / (t.parallelism.sequence_parallel ? tp : 1);
  }

  const Scenario& s;
  const Training& t;
  const ModelSpec& m;
  StageSpec spec;
  Emitter e;
  BlockCost block;
  RankShare share;
  ShardingDescriptor sharding;
  ShardingLayout layout;
  double element = 2, tokens = 0, root_params = 0, head_params = 0;
  int tp = 1, prefetch = 1;
  bool gather = false;
  std::string shard_role;
  std::uint32_t previous = 0;  // the op the compute chain waits on next
  std::uint32_t start = 0;
  std::vector<std::uint32_t> free_gather_fwd, free_gather_bwd, reductions;
};

StageProgramBuilder::StageProgramBuilder(const Scenario& scenario, const StageSpec& spec, Program& program)
    : impl_(std::make_shared<Impl>(scenario, spec, program)) {}

void StageProgramBuilder::prologue() {
  Impl& x = *impl_;
  const ModelStates states = model_states(x.s, x.share);
  const RuntimeOverheads& rt = x.s.cluster.runtime;
  // One NCCL buffer set per communicator a GPU belongs to, counted where the closed form counts it.
  const Bytes runtime = rt.cuda_context + rt.framework_overhead + rt.nccl_buffers * communicators_per_gpu(x.s);
  x.e.memory(OpKind::alloc, "runtime", runtime, {});
  x.e.memory(OpKind::alloc, "parameters", states.parameters, {});
  x.e.memory(OpKind::alloc, "gradients", states.gradients, {});
  x.start = x.e.memory(OpKind::alloc, "optimizer_states", states.optimizer_states, {});
  persistent_ = runtime + states.parameters + states.gradients + states.optimizer_states;
  // The strategy's communication buckets, allocated once and kept through the step.
  for (const PersistentBuffer& buffer : x.sharding.persistent_buffers) {
    x.start = x.e.memory(OpKind::alloc, buffer.tensor, buffer.size, {x.start});
    persistent_ += buffer.size;
  }
  if (x.gather && x.root_params > 0) {
    // The root unit (embedding, head) stays gathered through the step; its gathers repeat per pass.
    x.start = x.e.memory(OpKind::alloc, "root.params", ceil_bytes(x.root_params * x.element), {x.start});
  }
  x.previous = x.start;
}

void StageProgramBuilder::attach(const StageProgramBuilder& first) {
  impl_->start = first.impl_->start;
  impl_->previous = first.impl_->previous;
}

void StageProgramBuilder::forward(int mb) {
  Impl& x = *impl_;
  const std::string tag = "mb" + std::to_string(mb) + ".";
  const int stage = x.spec.virtual_stage;
  if (stage > 0) {
    x.previous = x.e.collective(tag + "recv_activations", Collective::p2p_forward, "pp_prev", x.boundary_bytes(),
                                {x.previous}, "act." + std::to_string(stage - 1) + "." + std::to_string(mb), Stream::recv_prev);
  }
  if (x.gather && x.root_params > 0) {
    x.previous = x.e.collective(tag + "root.ag", Collective::all_gather, x.shard_role, x.root_params * x.element, {x.previous});
  }
  const Bytes gathered = ceil_bytes(x.block.params * x.element);
  const Bytes activations = ceil_bytes(x.block.activation_bytes);
  for (int b = 0; b < x.spec.layers; ++b) {
    const std::string name = tag + "block" + std::to_string(x.spec.first_layer + b);
    std::vector<std::uint32_t> deps = {x.previous};
    if (x.gather) {
      // Prefetch: the gather of block b may start once block b-1-prefetch has been freed.
      std::vector<std::uint32_t> gdeps = {x.start};
      if (b > x.prefetch) gdeps.push_back(x.free_gather_fwd[b - 1 - x.prefetch]);
      auto a = x.e.memory(OpKind::alloc, name + ".params", gathered, gdeps, Stream::comm);
      a = x.fetch_shard_from_nvme(name, a);
      x.gather_block(name + ".fwd_ag", a, deps);
    }
    const auto act = x.e.memory(OpKind::alloc, name + ".activations", activations, deps);
    auto last = x.e.compute(name + ".fwd", ComputeClass::gemm, x.block.gemm_flops, x.block.gemm_bytes, {act},
                            x.block.gemm_shapes);
    last = x.gather_context_kv(name + ".fwd", last);
    last = x.e.compute(name + ".fwd_attn", ComputeClass::attention, x.block.attention_flops, x.block.attention_bytes,
                       {last}, x.block.attention_shapes);
    last = x.release_context_kv(name + ".fwd", last, false);
    last = x.e.compute(name + ".fwd_elementwise", ComputeClass::elementwise, 0, x.block.elementwise_bytes, {last});
    last = x.moe_exchange(name + ".fwd", last);
    x.previous = x.tp_collectives(name + ".fwd", last);
    if (x.gather) x.free_gather_fwd[b] = x.e.memory(OpKind::free, name + ".params", gathered, {x.previous});
  }
  if (x.spec.has_head) {
    // Output layer and loss, forward and backward (the last stage turns around here).
    const Bytes logits = ceil_bytes(x.tokens * (6.0 * x.m.vocab / x.tp + 4.0 * x.m.hidden));
    const auto la = x.e.memory(OpKind::alloc, tag + "logits", logits, {x.previous});
    const auto head = x.e.compute(tag + "head", ComputeClass::gemm, 3 * 2 * x.head_params * x.tokens,
                                  x.element * (x.head_params + x.tokens * x.m.vocab / x.tp), {la},
                                  {{static_cast<std::int64_t>(x.tokens), static_cast<std::int64_t>(x.head_params / x.m.hidden),
                                    x.m.hidden, 1}});
    x.previous = x.e.memory(OpKind::free, tag + "logits", logits, {head});
  } else {
    x.e.collective(tag + "send_activations", Collective::p2p_forward, "pp_next", x.boundary_bytes(), {x.previous},
                   "act." + std::to_string(stage) + "." + std::to_string(mb), Stream::send_next);
  }
}

void StageProgramBuilder::backward(int mb) {
  Impl& x = *impl_;
  const std::string tag = "mb" + std::to_string(mb) + ".";
  const int stage = x.spec.virtual_stage;
  // DDP (no_sync) and Megatron reduce gradients once, after the last micro-batch; ZeRO-3 and FSDP
  // hold only their shard of the gradients, so every micro-batch's backward reduce-scatters its
  // gradients into it (PyTorch FSDP without no_sync, DeepSpeed's partitioned gradients).
  const bool last_mb = mb + 1 == x.spec.microbatches;
  const bool reduce_now = last_mb || x.gather;
  if (!x.spec.has_head) {
    x.previous = x.e.collective(tag + "recv_gradients", Collective::p2p_backward, "pp_next", x.boundary_bytes(),
                                {x.previous}, "grad." + std::to_string(stage) + "." + std::to_string(mb), Stream::recv_next);
  }
  if (x.gather && x.root_params > 0) {
    // The root's parameters are gathered again for backward (3 Psi per step, as in the ZeRO and
    // FSDP papers) into the buffer that stays allocated.
    x.previous = x.e.collective(tag + "root.ag_bwd", Collective::all_gather, x.shard_role, x.root_params * x.element,
                                {x.previous});
  }
  const std::uint32_t backward_start = x.previous;
  const Bytes gathered = ceil_bytes(x.block.params * x.element);
  const Bytes activations = ceil_bytes(x.block.activation_bytes);
  for (int b = x.spec.layers - 1; b >= 0; --b) {
    const std::string name = tag + "block" + std::to_string(x.spec.first_layer + b);
    std::vector<std::uint32_t> deps = {x.previous};
    if (x.gather) {
      std::vector<std::uint32_t> gdeps = {backward_start};
      const int ahead = b + 1 + x.prefetch;
      if (ahead < x.spec.layers) gdeps.push_back(x.free_gather_bwd[ahead]);
      auto a = x.e.memory(OpKind::alloc, name + ".params_bwd", gathered, gdeps, Stream::comm);
      a = x.fetch_shard_from_nvme(name + ".bwd", a);
      x.gather_block(name + ".bwd_ag", a, deps);
    }
    if (x.sharding.unsharded_block_gradient) {
      deps.push_back(x.e.memory(OpKind::alloc, name + ".grads", gathered, {deps.front()}));
    }
    std::uint32_t last = deps.front();
    if (x.t.recompute == Recompute::full) {
      // Full recompute runs the block's forward again, its tensor-parallel collectives included.
      last = x.e.compute(name + ".recompute", ComputeClass::gemm, x.block.gemm_flops, x.block.gemm_bytes, deps,
                         x.block.gemm_shapes);
      last = x.moe_exchange(name + ".recompute", last);
      last = x.tp_collectives(name + ".recompute", last);
      deps = {last};
    }
    // Keys and values (recomputed, with full recompute) gathered again while the GEMMs' backward runs.
    const std::uint32_t before_kv = last;
    const auto kv = x.gather_context_kv(name + ".bwd", before_kv);
    last = x.e.compute(name + ".bwd", ComputeClass::gemm, 2 * x.block.gemm_flops, 2 * x.block.gemm_bytes, deps,
                       x.block.backward_shapes);
    std::vector<std::uint32_t> attention_deps = {last};
    if (kv != before_kv) attention_deps.push_back(kv);
    // Recompute (full or selective) runs the attention forward again: its FLOPs and, with explicit
    // scores, another pass over the score matrix.
    const double attention_again = x.t.recompute != Recompute::none ? 1.0 : 0.0;
    last = x.e.compute(name + ".bwd_attn", ComputeClass::attention, (2.5 + attention_again) * x.block.attention_flops,
                       (2 + attention_again) * x.block.attention_bytes, attention_deps, x.block.attention_shapes);
    last = x.release_context_kv(name + ".bwd", last, true);
    // Backward of the memory-bound kernels moves about twice their forward bytes (and recompute
    // runs the forward ones again).
    last = x.e.compute(name + ".bwd_elementwise", ComputeClass::elementwise, 0,
                       x.block.elementwise_bytes * (2 + (x.t.recompute == Recompute::full ? 1 : 0)), {last});
    last = x.moe_exchange(name + ".bwd", last);
    last = x.tp_collectives(name + ".bwd", last);
    x.previous = x.e.memory(OpKind::free, name + ".activations", activations, {last});
    if (x.gather) x.free_gather_bwd[b] = x.e.memory(OpKind::free, name + ".params_bwd", gathered, {x.previous});
    const std::size_t reduced_before = x.reductions.size();
    if (reduce_now) x.reduce_block_gradients(name, x.previous);
    if (x.sharding.unsharded_block_gradient) {
      // The unsharded gradient is freed once its reductions have read it.
      std::vector<std::uint32_t> read(x.reductions.begin() + static_cast<std::ptrdiff_t>(reduced_before), x.reductions.end());
      read.push_back(x.previous);
      x.e.memory(OpKind::free, name + ".grads", gathered, read);
    }
  }
  if (stage > 0) {
    x.e.collective(tag + "send_gradients", Collective::p2p_backward, "pp_prev", x.boundary_bytes(), {x.previous},
                   "grad." + std::to_string(stage - 1) + "." + std::to_string(mb), Stream::send_prev);
  }
  if (reduce_now) x.reduce_gradients(tag + "root", x.root_params, x.previous);
}

void StageProgramBuilder::epilogue(const std::vector<const StageProgramBuilder*>& other_chunks) {
  Impl& x = *impl_;
  std::vector<std::uint32_t> before_step = x.reductions;
  before_step.push_back(x.previous);
  int layers = x.spec.layers;
  for (const auto* chunk : other_chunks) {
    before_step.insert(before_step.end(), chunk->impl_->reductions.begin(), chunk->impl_->reductions.end());
    before_step.push_back(chunk->impl_->previous);
    layers += chunk->impl_->spec.layers;
  }
  const double shard_params = x.layout.optimizer ? x.share.trainable / x.layout.degree : x.share.trainable;
  std::uint32_t step;
  const bool optimizer_on_nvme = x.t.offload.optimizer == OffloadTarget::nvme;
  const bool params_on_nvme = x.t.offload.parameters == OffloadTarget::nvme;
  if (x.t.offload.optimizer != OffloadTarget::none || x.t.offload.parameters != OffloadTarget::none) {
    std::uint32_t last = x.e.copy("grads_to_host", CopyDirection::device_to_host, shard_params * x.element, before_step);
    // ZeRO-Infinity steps the optimizer in host memory: its states come from NVMe and go back
    // (DeepSpeed's default, without pipelined reads and writes).
    const double state_bytes = shard_params * state_bytes_per_param(x.t).optimizer;
    if (optimizer_on_nvme) last = x.e.copy("optimizer_states_from_nvme", CopyDirection::nvme_to_host, state_bytes, {last});
    Op cpu;
    cpu.stream = Stream::copy;
    cpu.name = "optimizer_cpu";
    cpu.compute_class = ComputeClass::cpu_optimizer;
    cpu.flops = shard_params;  // parameters to update: the backend divides by the CPU's update rate per GPU
    cpu.deps = {last};
    last = x.e.add(cpu);
    if (optimizer_on_nvme) last = x.e.copy("optimizer_states_to_nvme", CopyDirection::host_to_nvme, state_bytes, {last});
    // Parameters kept on NVMe are written back there and fetched layer by layer in the next step;
    // the others return to the device now.
    step = params_on_nvme ? x.e.copy("params_to_nvme", CopyDirection::host_to_nvme, shard_params * x.element, {last})
                          : x.e.copy("params_to_device", CopyDirection::host_to_device, shard_params * x.element, {last});
  } else {
    // Adam reads and writes parameters, gradients and both moments: a memory-bound pass.
    step = x.e.compute("optimizer", ComputeClass::elementwise, 10 * shard_params, 32 * shard_params, before_step);
  }
  if (x.spec.dp_ranks > 1 && x.layout.optimizer && !x.gather) {
    // ZeRO-1/2: every rank gathers the updated parameters of the others, block by block (experts
    // from the replicas holding the same experts).
    for (int b = 0; b < layers; ++b) {
      x.e.collective("block" + std::to_string(b) + ".param_ag", Collective::all_gather, "dp",
                     (x.block.params - x.block.expert_params) * x.element, {step});
      if (x.experts_shared()) {
        x.e.collective("block" + std::to_string(b) + ".experts.param_ag", Collective::all_gather, "edp",
                       x.block.expert_params * x.element, {step});
      }
    }
    if (x.root_params > 0) {
      x.e.collective("root.param_ag", Collective::all_gather, "dp", x.root_params * x.element, {step});
    }
  }
}

}  // namespace memtwin
