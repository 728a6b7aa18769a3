#include "models/plan/training_plan.h"

#include <algorithm>
#include <cmath>

#include "models/memory/activations.h"
#include "models/memory/model_states.h"
#include "models/memory/rank_share.h"
#include "models/memory/weight_shapes.h"
#include "models/model_facts.h"

namespace memtwin {
namespace {

Bytes bytes_of(double b) { return Bytes(static_cast<std::int64_t>(std::ceil(b))); }

// Appends ops to one program and hands back their indices.
class Emitter {
 public:
  explicit Emitter(Program& p) : p_(p) {}
  std::uint32_t add(Op op) {
    p_.ops.push_back(std::move(op));
    return static_cast<std::uint32_t>(p_.ops.size() - 1);
  }
  std::uint32_t compute(std::string name, ComputeClass c, double flops, double bytes, std::vector<std::uint32_t> deps) {
    Op op;
    op.kind = OpKind::compute;
    op.stream = Stream::compute;
    op.name = std::move(name);
    op.compute_class = c;
    op.flops = flops;
    op.bytes = bytes;
    op.deps = std::move(deps);
    return add(std::move(op));
  }
  std::uint32_t collective(std::string name, Collective c, std::string role, double bytes_total,
                           std::vector<std::uint32_t> deps) {
    Op op;
    op.kind = OpKind::collective;
    op.stream = Stream::comm;
    op.name = std::move(name);
    op.collective = c;
    op.role = std::move(role);
    op.bytes_total = bytes_total;
    op.deps = std::move(deps);
    return add(std::move(op));
  }
  std::uint32_t alloc(std::string tensor, Bytes size, std::vector<std::uint32_t> deps, Stream s = Stream::compute) {
    Op op;
    op.kind = OpKind::alloc;
    op.stream = s;
    op.name = "alloc." + tensor;
    op.tensor = std::move(tensor);
    op.size = size;
    op.deps = std::move(deps);
    return add(std::move(op));
  }
  std::uint32_t free(std::string tensor, Bytes size, std::vector<std::uint32_t> deps, Stream s = Stream::compute) {
    Op op;
    op.kind = OpKind::free;
    op.stream = s;
    op.name = "free." + tensor;
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

// Per-block costs on one GPU for one micro-batch.
struct BlockCost {
  double gemm_flops = 0, gemm_bytes = 0;       // forward
  double attention_flops = 0, attention_bytes = 0;
  double elementwise_bytes = 0;                // forward memory-bound kernels (norms, rotary, SwiGLU, residuals)
  double activation_bytes = 0;                 // stored for backward
  double params = 0;                           // this rank's share of the block
};

BlockCost block_cost(const Scenario& s) {
  const ModelSpec& m = s.model;
  const Training& t = *s.training;
  const double tp = t.parallelism.tensor;
  const double tokens = static_cast<double>(t.seq_len) * t.micro_batch;
  const double element = t.precision == Precision::fp32 ? 4 : 2;
  BlockCost c;
  double weights = 0;
  for (const auto& w : block_matrices(m)) {
    const double active = (w.copies > 1) ? w.rows * w.cols * m.experts_per_token : w.rows * w.cols;
    weights += active / tp;
  }
  c.gemm_flops = 2 * weights * tokens;
  c.gemm_bytes = element * (weights + tokens * (4.0 * m.hidden + 3.0 * m.intermediate * m.experts_per_token / tp));
  const double q_width = static_cast<double>(m.heads) * m.head_dim / tp;
  // Causal FlashAttention: QK^T and AV over half the context on average.
  c.attention_flops = 4.0 * tokens * t.seq_len * q_width * 0.5;
  c.attention_bytes = element * tokens * 4 * q_width;
  if (t.attention == AttentionImpl::explicit_scores) {
    // Materialised scores [b, heads/t, s, s]: written by QK^T, read and written by the fused
    // scale-mask-softmax, by dropout (with its mask), read by AV: about six passes of 16-bit scores.
    const double heads = static_cast<double>(m.heads) / tp;
    const double scores = t.micro_batch * heads * static_cast<double>(t.seq_len) * t.seq_len;
    c.attention_bytes += scores * element * (m.dropout ? 6.0 : 4.0);
    c.attention_flops *= 2;  // no causal skipping: the whole score matrix is computed, then masked
  }
  // Memory-bound kernels of a block, each reading and writing its tensors once: two norms (h in,
  // h out), two residual adds (2h in, h out), rotary on q and k, the gated activation (2I in, I out)
  // or GeLU (I in, I out), and dropout where the model uses it.
  const double kv_width = static_cast<double>(m.kv_heads) * m.head_dim / tp;
  const bool gated = m.mlp == MlpKind::swiglu || m.mlp == MlpKind::geglu;
  const double inner = static_cast<double>(m.intermediate) * m.experts_per_token / tp;
  const double per_token = 4.0 * m.hidden + 6.0 * m.hidden + 2 * (q_width + kv_width) + (gated ? 3 * inner : 2 * inner) +
                           (m.dropout ? 4.0 * m.hidden : 0.0);
  c.elementwise_bytes = element * tokens * per_token;
  c.activation_bytes = block_activation_bytes_per_token(m, t.seq_len, t.parallelism.tensor, t.parallelism.sequence_parallel,
                                                        t.recompute, t.attention) *
                       tokens;
  c.params = rank_share(m, t).block_parameters;
  return c;
}

bool gathers_parameters(const Training& t) {
  return (t.sharding.strategy == ShardingStrategy::zero && t.sharding.zero_stage == 3) ||
         (t.sharding.strategy == ShardingStrategy::fsdp &&
          (t.sharding.fsdp_mode == FsdpMode::full_shard || t.sharding.fsdp_mode == FsdpMode::hybrid_shard));
}

}  // namespace

double model_flops_per_gpu_step(const Scenario& s) {
  const Training& t = *s.training;
  const double tokens_per_gpu = static_cast<double>(t.global_batch) * t.seq_len / s.cluster.total_gpus();
  return 3 * forward_flops_per_token(s.model, t.seq_len).value() * tokens_per_gpu;
}

Plan build_training_plan(const Scenario& s) {
  const Training& t = *s.training;
  const ModelSpec& m = s.model;
  if (!m.architecture_known) throw PlanUnsupported("simulating a step needs the model's architecture, not only its parameter count");
  if (t.parallelism.pipeline > 1) throw PlanUnsupported("the sim backend does not model pipeline parallelism yet; use --backend analytic");
  if (t.parallelism.expert > 1) throw PlanUnsupported("the sim backend does not model expert parallelism yet; use --backend analytic");

  const int gpus = s.cluster.total_gpus();
  const int tp = t.parallelism.tensor;
  const int dp = gpus / tp;
  const double element = t.precision == Precision::fp32 ? 4 : 2;
  const int microbatches = t.global_batch / (t.micro_batch * dp);
  const RankShare share = rank_share(m, t);
  const ModelStates states = model_states(s, share);
  const ShardingLayout layout = sharding_layout(t, dp);
  const BlockCost block = block_cost(s);
  const int layers = share.stage_layers;
  const double tokens = static_cast<double>(t.seq_len) * t.micro_batch;
  const bool hybrid = t.sharding.strategy == ShardingStrategy::fsdp && t.sharding.fsdp_mode == FsdpMode::hybrid_shard &&
                      layout.degree < dp;
  const std::string shard_role = hybrid ? "shard" : "dp";

  Plan plan;
  plan.description = std::to_string(gpus) + " ranks, one program (data parallel " + std::to_string(dp) + ", tensor " +
                     std::to_string(tp) + "), " + std::to_string(microbatches) + " micro-batches";
  // Communicator groups: tensor-parallel ranks are adjacent (inside a node), data-parallel strided.
  for (int d = 0; d < dp; ++d) {
    std::vector<int> g;
    for (int r = 0; r < tp; ++r) g.push_back(d * tp + r);
    plan.groups["tp"].push_back(g);
  }
  for (int r = 0; r < tp; ++r) {
    std::vector<int> g;
    for (int d = 0; d < dp; ++d) g.push_back(d * tp + r);
    plan.groups["dp"].push_back(g);
    if (hybrid) {
      const int shard = layout.degree;
      for (int start = 0; start < dp; start += shard) {
        plan.groups["shard"].push_back(std::vector<int>(g.begin() + start, g.begin() + start + shard));
      }
      for (int offset = 0; offset < shard; ++offset) {
        std::vector<int> replica;
        for (int start = 0; start < dp; start += shard) replica.push_back(g[start + offset]);
        plan.groups["replica"].push_back(replica);
      }
    }
  }
  plan.program_of_rank.assign(gpus, 0);
  plan.group_of_rank.resize(gpus);
  for (const auto& [role, gs] : plan.groups) {
    for (std::size_t i = 0; i < gs.size(); ++i)
      for (int r : gs[i]) plan.group_of_rank[r][role] = static_cast<int>(i);
  }

  plan.programs.push_back(Program{"train_step", {}});
  Emitter e(plan.programs.back());

  // Persistent state first: the timeline starts with it.
  const RuntimeOverheads& rt = s.cluster.runtime;
  int communicators = (dp > 1 ? 1 : 0) + (tp > 1 ? 1 : 0) + (hybrid ? 1 : 0);
  const Bytes runtime = rt.cuda_context + rt.framework_overhead + rt.nccl_buffers * communicators;
  std::vector<std::uint32_t> start = {e.alloc("runtime", runtime, {}), e.alloc("parameters", states.parameters, {}),
                                      e.alloc("gradients", states.gradients, {}),
                                      e.alloc("optimizer_states", states.optimizer_states, {})};
  plan.persistent_bytes = runtime + states.parameters + states.gradients + states.optimizer_states;
  const int dp_ranks = plan.groups["dp"].front().size();
  if (t.sharding.strategy == ShardingStrategy::ddp && dp_ranks > 1 &&
      (t.framework == Framework::fsdp || t.framework == Framework::deepspeed)) {
    start.push_back(e.alloc("ddp_buckets", bytes_of(share.trainable * element), {}));
  }

  const bool gather = gathers_parameters(t);
  const int prefetch = t.sharding.limit_all_gathers ? 1 : 2;  // gathers ahead of the block computing
  const Bytes gathered = bytes_of(block.params * element);
  const Bytes activations = bytes_of(block.activation_bytes);
  const double head_params = (m.tied_embeddings ? count_parameters(m).embedding : count_parameters(m).lm_head) / tp;
  const Bytes logits = bytes_of(tokens * (6.0 * m.vocab / tp + 4.0 * m.hidden));
  auto tp_collectives = [&](const std::string& where, std::uint32_t dep) {
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
  };

  // The root unit: embedding, final norm and output head (FSDP's root; ZeRO-3 gathers them too).
  const Bytes root_gathered = bytes_of(share.root_parameters * element);
  auto reduce_gradients = [&](const std::string& name, double params, std::uint32_t after,
                              std::vector<std::uint32_t>& into) {
    if (dp_ranks < 2) return;
    const double grad_bytes = params * element;
    if (layout.gradients || gather) {
      const auto rs = e.collective(name + ".grad_rs", Collective::reduce_scatter, shard_role, grad_bytes, {after});
      into.push_back(rs);
      if (hybrid) {
        into.push_back(e.collective(name + ".grad_ar_replicas", Collective::all_reduce, "replica",
                                    grad_bytes / layout.degree, {rs}));
      }
    } else if (layout.optimizer) {
      into.push_back(e.collective(name + ".grad_rs", Collective::reduce_scatter, "dp", grad_bytes, {after}));
    } else {
      into.push_back(e.collective(name + ".grad_ar", Collective::all_reduce, "dp", grad_bytes, {after}));
    }
  };

  std::uint32_t previous = start.back();
  std::vector<std::uint32_t> grad_reductions;
  for (int mb = 0; mb < microbatches; ++mb) {
    const std::string tag = "mb" + std::to_string(mb) + ".";
    const bool last_mb = mb + 1 == microbatches;
    if (gather) {
      const auto a = e.alloc(tag + "root.params", root_gathered, {previous}, Stream::comm);
      previous = e.collective(tag + "root.ag", Collective::all_gather, shard_role, root_gathered.as_double(), {a});
    }
    // Forward.
    std::vector<std::uint32_t> forward(layers), gathered_fwd(layers), free_gather(layers);
    for (int b = 0; b < layers; ++b) {
      const std::string name = tag + "block" + std::to_string(b);
      std::vector<std::uint32_t> deps = {previous};
      if (gather) {
        // Prefetch: the gather of block b may start once block b-1-prefetch has been freed.
        std::vector<std::uint32_t> gdeps = {start.back()};
        if (b > prefetch) gdeps.push_back(free_gather[b - 1 - prefetch]);
        const auto a = e.alloc(name + ".params", gathered, gdeps, Stream::comm);
        gathered_fwd[b] = e.collective(name + ".fwd_ag", Collective::all_gather, shard_role, gathered.as_double(), {a});
        deps.push_back(gathered_fwd[b]);
      }
      const auto act = e.alloc(name + ".activations", activations, deps);
      const auto g = e.compute(name + ".fwd", ComputeClass::gemm, block.gemm_flops, block.gemm_bytes, {act});
      const auto at = e.compute(name + ".fwd_attn", ComputeClass::attention, block.attention_flops, block.attention_bytes, {g});
      const auto ew = e.compute(name + ".fwd_elementwise", ComputeClass::elementwise, 0, block.elementwise_bytes, {at});
      previous = tp_collectives(name + ".fwd", ew);
      forward[b] = previous;
      if (gather) free_gather[b] = e.free(name + ".params", gathered, {previous});
    }
    // Output layer and loss, then its backward.
    const auto la = e.alloc(tag + "logits", logits, {previous});
    const auto head = e.compute(tag + "head", ComputeClass::gemm, 3 * 2 * head_params * tokens,
                                element * (head_params + tokens * m.vocab / tp), {la});
    previous = e.free(tag + "logits", logits, {head});
    if (gather) {
      // The root's parameters are gathered again for backward (3 Psi per step, as in the ZeRO and
      // FSDP papers); the buffer itself stays allocated through the micro-batch.
      previous = e.collective(tag + "root.ag_bwd", Collective::all_gather, shard_role, root_gathered.as_double(), {previous});
    }
    // Backward, last block first.
    const std::uint32_t backward_start = previous;
    std::vector<std::uint32_t> free_gather_bwd(layers);
    for (int b = layers - 1; b >= 0; --b) {
      const std::string name = tag + "block" + std::to_string(b);
      std::vector<std::uint32_t> deps = {previous};
      if (gather) {
        std::vector<std::uint32_t> gdeps = {backward_start};
        const int ahead = b + 1 + prefetch;
        if (ahead < layers) gdeps.push_back(free_gather_bwd[ahead]);
        const auto a = e.alloc(name + ".params_bwd", gathered, gdeps, Stream::comm);
        deps.push_back(e.collective(name + ".bwd_ag", Collective::all_gather, shard_role, gathered.as_double(), {a}));
      }
      std::uint32_t last = deps.front();
      if (t.recompute == Recompute::full) {
        // Full recompute runs the block's forward again, its tensor-parallel collectives included.
        last = e.compute(name + ".recompute", ComputeClass::gemm, block.gemm_flops, block.gemm_bytes, deps);
        last = tp_collectives(name + ".recompute", last);
        deps = {last};
      }
      last = e.compute(name + ".bwd", ComputeClass::gemm, 2 * block.gemm_flops, 2 * block.gemm_bytes, deps);
      last = e.compute(name + ".bwd_attn", ComputeClass::attention,
                       2.5 * block.attention_flops + (t.recompute != Recompute::none ? block.attention_flops : 0),
                       2 * block.attention_bytes, {last});
      // Backward of the memory-bound kernels moves about twice their forward bytes (and recompute
      // runs the forward ones again).
      last = e.compute(name + ".bwd_elementwise", ComputeClass::elementwise, 0,
                       block.elementwise_bytes * (2 + (t.recompute == Recompute::full ? 1 : 0)), {last});
      last = tp_collectives(name + ".bwd", last);
      previous = e.free(name + ".activations", activations, {last});
      if (gather) free_gather_bwd[b] = e.free(name + ".params_bwd", gathered, {previous});
      if (last_mb) reduce_gradients(name, block.params, previous, grad_reductions);
    }
    if (gather) previous = e.free(tag + "root.params", root_gathered, {previous});
    if (last_mb) reduce_gradients(tag + "root", share.root_parameters, previous, grad_reductions);
  }
  // Optimizer step on this rank's shard.
  std::vector<std::uint32_t> before_step = grad_reductions;
  before_step.push_back(previous);
  const double shard_params = layout.optimizer ? share.trainable / layout.degree : share.trainable;
  std::uint32_t step;
  if (t.offload.optimizer == OffloadTarget::cpu || t.offload.parameters == OffloadTarget::cpu) {
    const auto d2h = e.copy("grads_to_host", CopyDirection::device_to_host, shard_params * element, before_step);
    Op cpu;
    cpu.kind = OpKind::compute;
    cpu.stream = Stream::copy;
    cpu.name = "optimizer_cpu";
    cpu.compute_class = ComputeClass::cpu_optimizer;
    cpu.flops = shard_params;  // parameters to update: the backend divides by the CPU's update rate per GPU
    cpu.deps = {d2h};
    const auto c = e.add(cpu);
    step = e.copy("params_to_device", CopyDirection::host_to_device, shard_params * element, {c});
  } else {
    // Adam reads and writes parameters, gradients and both moments: a memory-bound pass.
    step = e.compute("optimizer", ComputeClass::elementwise, 10 * shard_params, 32 * shard_params, before_step);
  }
  if (dp_ranks > 1 && layout.optimizer && !gather) {
    // ZeRO-1/2: every rank gathers the updated parameters of the others, block by block.
    for (int b = 0; b < layers; ++b) {
      e.collective("block" + std::to_string(b) + ".param_ag", Collective::all_gather, "dp", block.params * element, {step});
    }
    e.collective("root.param_ag", Collective::all_gather, "dp", share.root_parameters * element, {step});
  }
  return plan;
}

}  // namespace memtwin
