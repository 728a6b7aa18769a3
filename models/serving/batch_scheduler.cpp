#include "models/serving/batch_scheduler.h"

#include <algorithm>
#include <stdexcept>
#include <cmath>
#include <optional>

#include "models/hash.h"

namespace memtwin {

ServingRun start_serving_run(const std::vector<Request>& requests) {
  ServingRun run;
  run.requests.resize(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    RequestRecord& r = run.requests[i];
    r.id = requests[i].id;
    r.prompt_tokens = requests[i].prompt_tokens;
    r.output_tokens = requests[i].output_tokens;
    r.arrival_s = requests[i].arrival_s;
    r.prefix_group = requests[i].prefix_group;
    r.prefix_tokens = requests[i].prefix_tokens;
  }
  return run;
}

std::string serving_plan_hash(const Scenario& s, const std::vector<Request>& requests, std::int64_t capacity_blocks,
                              double block_bytes) {
  const ServingSpec& sv = s.inference->serving;
  Fnv1a f;
  for (const auto& r : requests) {
    f.add(r.id);
    f.add(r.arrival_s);
    f.add(static_cast<std::int64_t>(r.prompt_tokens));
    f.add(static_cast<std::int64_t>(r.output_tokens));
    if (r.prefix_group >= 0) {
      f.add(static_cast<std::int64_t>(r.prefix_group));
      f.add(static_cast<std::int64_t>(r.prefix_tokens));
    }
  }
  for (std::int64_t v : {capacity_blocks, std::int64_t{sv.replicas}, std::int64_t{sv.max_num_seqs},
                         std::int64_t{sv.max_num_batched_tokens}, std::int64_t{sv.block_size}, std::int64_t{sv.chunked_prefill},
                         static_cast<std::int64_t>(sv.preemption), static_cast<std::int64_t>(s.inference->kv_cache.compression.method),
                         std::int64_t{sv.prefix_caching}})
    f.add(v);
  f.add(block_bytes);
  // Replicas stepping together as one expert-parallel group run under other rules (hashes of
  // runs without it are unchanged).
  if (sv.expert_parallel_size() > 1) f.add(std::int64_t{sv.expert_parallel_size()});
  return f.hex();
}

BatchScheduler::BatchScheduler(int replica, const Scenario& s, const KvCompressor& kv, ServingRun& out,
                               std::int64_t capacity_blocks, double block_bytes, int virtual_engine,
                               int virtual_engines)
    : index_(replica), virtual_engine_(virtual_engine), role_(s.inference->serving.role), s_(s), kv_(kv), uniform_token_bytes_(kv.uniform_token_bytes()), out_(out), capacity_(capacity_blocks), block_bytes_(block_bytes) {
  share_prefixes_ = s.inference->serving.prefix_caching && shares_prefix_blocks(s.inference->kv_cache.compression.method);
  // A replica's share of each node's tiers is its GPUs' share; a block of the replica is a block on
  // each of its GPUs (block_bytes is one GPU's), all of which land in the tier. So a tier holds
  // tier bytes / (GPUs per node x block bytes) of the replica's blocks; each GPU moves its own part
  // over its own PCIe link.
  swap_capacity_blocks_ =
      static_cast<std::int64_t>(s.inference->serving.swap_space.as_double() / block_bytes) / virtual_engines;
  const TierSpec& tiers = s.inference->tiers;
  const double per_block = static_cast<double>(s.cluster.gpus_per_node) * block_bytes * virtual_engines;
  if (tiers.host_memory) host_tier_.capacity_blocks = static_cast<std::int64_t>(tiers.host_memory->as_double() / per_block);
  if (tiers.nvme) nvme_tier_.capacity_blocks = static_cast<std::int64_t>(tiers.nvme->as_double() / per_block);
}

void BatchScheduler::enqueue(std::size_t record, int prompt) {
  Sequence q;
  q.record = record;
  q.prompt = prompt;
  q.original_prompt = out_.requests[record].prompt_tokens;
  q.output_tokens = out_.requests[record].output_tokens;
  if (role_ == InstanceRole::decode) {
    // Its prompt's KV came from a prefill instance, which produced its first token.
    q.prefilled = q.prompt;
    q.generated = 1;
    q.produced = true;
    q.last_token_s = out_.requests[record].first_token_s;
    q.transferred = true;
  }
  waiting_.push_back(q);
}

std::optional<ScheduledIteration> BatchScheduler::schedule() {
  const ServingSpec& sv = s_.inference->serving;
  ScheduledIteration it;
  it.decoding.reserve(running_.size());  // one allocation per iteration, not one per doubling
  // Each pass that schedules nothing preempts or swaps in a sequence; more passes than that are a
  // livelock, a bug to report rather than a hang.
  const std::size_t passes = 4 * (running_.size() + waiting_.size()) + 8;
  const auto watermark = static_cast<std::int64_t>(std::ceil(0.01 * capacity_));  // free blocks admission keeps
  for (std::size_t pass = 0;; ++pass) {
    if (waiting_.empty() && running_.empty()) return std::nullopt;
    if (pass > passes) throw std::logic_error("batch scheduler: no iteration after " + std::to_string(pass) + " passes");
    bool swapped_in = false;
    it.decoding.clear();
    it.prefilling.clear();
    it.chunks.clear();
    it.load = IterationLoad{};
    int budget = sv.max_num_batched_tokens;
    // Decodes first (one token each); a sequence that needs a block when none is free preempts
    // the newest running sequence (vLLM's policy), possibly itself. The loop notes whether it met a
    // sequence mid-prompt: it sees every one that stays running unless the budget or the blocks end
    // it first (preemptions only take sequences behind it), and then the prefill scan can be skipped.
    // (A deque iterator: popping the back leaves the others valid.)
    bool mid_prompt = false, saw_all = false;
    for (auto at = running_.begin();;) {
      if (at == running_.end()) {
        saw_all = true;
        break;
      }
      if (budget <= 0) break;
      Sequence& q = *at;
      if (q.prefilled < q.prompt) {
        mid_prompt = true;
        ++at;
        continue;
      }
      const double held_bytes = kv_bytes(q, q.prefilled, q.generated);
      // Most decode steps stay inside the sequence's last block: then it needs none, and neither
      // the division of blocks_of nor a grow is spent on it (the same count: every size here is a
      // byte count far from a double's rounding at the block boundaries).
      const std::int64_t have = q.blocks + q.shared;
      const double have_bytes = static_cast<double>(have) * block_bytes_;
      const std::int64_t need =
          held_bytes <= have_bytes && held_bytes > have_bytes - block_bytes_ ? 0 : blocks_of(held_bytes) - have;
      bool preempted_self = false;
      while (need > free_blocks() && !running_.empty()) {
        preempted_self = &running_.back() == &q;
        preempt_newest(it);
        if (preempted_self) break;
      }
      if (preempted_self) {  // q was the last one running
        saw_all = true;
        break;
      }
      if (need > free_blocks()) break;
      if (need != 0) grow(q, have + need);
      it.decoding.push_back(&q);
      // Its share of the iteration's decode work (a later preemption in this pass only takes
      // sequences behind it; a pass that schedules nothing starts the load again).
      it.load.decode_sequences += 1;
      if (uniform_token_bytes_ > 0) {  // what the calls below return for such a method
        it.load.decode_context += static_cast<double>(q.prompt + q.generated);
        it.load.kv_bytes_read += q.generated > 0 ? held_bytes : static_cast<double>(q.prompt) * uniform_token_bytes_;
      } else {
        it.load.decode_context += static_cast<double>(kv_.kept_tokens(q.prompt, q.generated));
        it.load.kv_bytes_read += q.generated > 0 ? held_bytes : kv_.sequence_bytes(q.prompt, q.generated);
        it.load.decode_residual_context += static_cast<double>(kv_.residual_tokens(q.prompt, q.generated));
      }
      --budget;
      ++at;
    }
    // Prefills: running sequences mid-prompt, then admission from the waiting queue.
    auto try_prefill = [&](Sequence& q, bool admitting) {
      if (budget <= 0 || static_cast<int>(it.decoding.size() + it.prefilling.size()) >= sv.max_num_seqs) return false;
      const int remaining = q.prompt - q.prefilled;
      const int chunk = sv.chunked_prefill ? std::min(remaining, budget) : remaining;
      if (chunk > budget) return false;
      const std::int64_t target = blocks_for(q, q.prefilled + chunk, 0);
      if (target - (q.blocks + q.shared) > free_blocks() - (admitting ? watermark : 0)) return false;
      grow(q, target);
      it.load.prefill_attention += chunk * (q.prefilled + chunk / 2.0);
      it.load.prefill_tokens += chunk;
      if (q.prefilled + chunk >= q.prompt) {
        ++it.load.prefills_completing;
        it.load.completed_prompt_tokens += q.prompt;
        it.load.completed_prompt_kept_bytes += kv_.sequence_bytes(q.prompt, 0);
      }
      budget -= chunk;
      it.prefilling.push_back(&q);
      it.chunks.push_back(chunk);
      return true;
    };
    if (mid_prompt || !saw_all) {
      for (auto& q : running_) {
        if (q.prefilled < q.prompt) try_prefill(q, false);
      }
    }
    while (!waiting_.empty()) {
      Sequence& q = waiting_.front();
      if (q.swapped) {
        // Swapped out while decoding: its blocks come back over PCIe, then it decodes again, so
        // there must be room for its next token too (a sequence of channel-key groups may need more
        // blocks, or fewer).
        if (std::max(q.blocks, blocks_for(q, q.prefilled, q.generated)) > free_blocks() - watermark) break;
        swapped_in = true;
        evict_cached_prefixes(q.blocks);
        it.swap_in_bytes += q.blocks * block_bytes_;
        swapped_in_bytes_ += q.blocks * block_bytes_;
        (host_tier_.capacity_blocks > 0 ? host_tier_.used_blocks : swapped_blocks_) -= q.blocks;
        used_ += q.blocks;
        note_peak();
        q.swapped = false;
        running_.push_back(q);
        waiting_.pop_front();
        continue;
      }
      if (q.transferred) {
        // A disaggregated decode instance admits a received KV cache whole (and the block for the
        // next token); it decodes from the next pass on.
        const std::int64_t need = blocks_for(q, q.prompt, q.generated + 1);
        if (need > capacity_ - watermark) {  // can never fit
          reject_front();
          continue;
        }
        if (need > free_blocks() - watermark) break;
        q.transferred = false;
        grow(q, blocks_for(q, q.prompt, q.generated));
        running_.push_back(q);
        waiting_.pop_front();
        swapped_in = true;
        continue;
      }
      if (blocks_for(q, q.prompt, 0) > capacity_ - watermark) {  // can never fit
        reject_front();
        continue;
      }
      const bool fresh = q.prefilled == 0 && q.shared == 0;
      const int cached_before = out_.requests[q.record].cached_tokens;
      if (fresh) attach_prefix(q);
      if (!try_prefill(q, true)) {
        if (fresh) {  // not admitted after all: leave the cache as it was
          release_prefix(q);
          q.prefilled = 0;
          out_.requests[q.record].cached_tokens = cached_before;
        }
        break;
      }
      running_.push_back(q);
      it.prefilling.back() = &running_.back();
      waiting_.pop_front();
    }
    if (!it.decoding.empty() || !it.prefilling.empty()) break;
    // A sequence swapped in after the decodes were scheduled decodes in another pass (preempting
    // it now would only swap it out again, for ever).
    if (swapped_in) continue;
    // Nothing fits even alone: the newest running sequence gives way, or we wait.
    if (running_.empty()) return std::nullopt;
    preempt_newest(it);
  }
  it.tier = pending_tier_;
  pending_tier_ = TierTransfers{};
  if (on_prefill_start) {
    for (const Sequence* q : it.prefilling)
      if (q->prefilled == 0) on_prefill_start(q->record);
  }
  return it;
}

void BatchScheduler::complete(const ScheduledIteration& it, double started, double now) {
  ++out_.iterations;
  if (out_.iteration_log.size() < ServingRun::kMaxLoggedIterations) {
    out_.iteration_log.push_back({index_, started, now, it.load.decode_sequences, it.load.prefill_tokens});
  }
  // Only a sequence that produced a token this iteration can have finished.
  bool any_done = false;
  for (Sequence* q : it.decoding) any_done |= token(*q, now);
  for (std::size_t i = 0; i < it.prefilling.size(); ++i) {
    Sequence& q = *it.prefilling[i];
    q.prefilled += it.chunks[i];
    if (q.shared > 0) {
      auto p = prefixes_.find(out_.requests[q.record].prefix_group);
      if (p != prefixes_.end() && !p->second.ready && q.prefilled >= p->second.blocks * s_.inference->serving.block_size)
        p->second.ready = true;
    }
    if (q.prefilled == q.prompt && q.generated == 0) any_done |= token(q, now);  // the first token ends the prefill
  }
  if (any_done) finish_done(now);
  if (index_ == 0 && virtual_engine_ == 0) {
    out_.record_kv_sample(kv_iterations_++,
                          {now, static_cast<double>(used_blocks()) / capacity_, swapped_out_bytes_, swapped_in_bytes_,
                           out_.prefix_offload_bytes, out_.prefix_fetch_host_bytes, out_.prefix_fetch_nvme_bytes,
                           out_.prefix_nvme_write_bytes, host_tier_.used_blocks * block_bytes_,
                           nvme_tier_.used_blocks * block_bytes_});
  }
}

inline double BatchScheduler::kv_bytes(const Sequence& q, int prefilled, int generated) const {
  // Prefill holds what the method needs while prefilling (the whole prompt for methods that
  // select afterwards); decoding holds the compressed footprint.
  if (uniform_token_bytes_ > 0) {  // the calls below, without them (see KvCompressor::uniform_token_bytes)
    const int tokens = prefilled >= q.prompt && generated > 0 ? q.prompt + generated : prefilled;
    return static_cast<double>(tokens) * uniform_token_bytes_;
  }
  if (prefilled >= q.prompt && generated > 0) return kv_.sequence_bytes(q.prompt, generated);
  const double bytes = kv_.prefill_bytes(prefilled);
  return prefilled >= q.prompt ? std::max(bytes, kv_.sequence_bytes(q.prompt, generated)) : bytes;
}

inline std::int64_t BatchScheduler::blocks_of(double bytes) const {
  // ceil without libm: Debian's baseline x86-64 has no rounding instruction, so std::ceil is a call,
  // and this runs for every sequence of every iteration. Exact for the non-negative sizes it sees.
  const double blocks = bytes / block_bytes_;
  const auto whole = static_cast<std::int64_t>(blocks);
  return whole + (static_cast<double>(whole) < blocks ? 1 : 0);
}

void BatchScheduler::grow(Sequence& q, std::int64_t total) {
  const std::int64_t own = std::max<std::int64_t>(0, total - q.shared);
  if (own > q.blocks) evict_cached_prefixes(own - q.blocks);  // most decode steps stay inside their last block
  used_ += own - q.blocks;
  q.blocks = own;
  note_peak();
}

void BatchScheduler::preempt_newest(ScheduledIteration& it) {
  Sequence q = running_.back();
  running_.pop_back();
  RequestRecord& r = out_.requests[q.record];
  // Its blocks go to host memory, a shared prefix's too (as a private copy: others may keep using
  // the cached one, or it may be evicted before this sequence returns) when the swap space has room;
  // else it is recomputed, as vLLM falls back.
  // With a host tier the KV goes there (making room by moving prefixes down), else into vLLM's
  // swap space.
  const std::int64_t moved = q.blocks + q.shared;
  const bool swap = s_.inference->serving.preemption == Preemption::swap;
  const bool into_tier = host_tier_.capacity_blocks > 0;
  const bool room = swap && (into_tier ? make_host_room(moved) : swapped_blocks_ + moved <= swap_capacity_blocks_);
  if (swap && !room) ++out_.swap_space_full;
  if (room) {
    it.swap_out_bytes += moved * block_bytes_;
    out_.swap_bytes += 2 * moved * block_bytes_;  // out now, in later
    swapped_out_bytes_ += moved * block_bytes_;
    ++r.swaps;
    ++out_.swaps;
    used_ -= q.blocks;  // the blocks live in host memory meanwhile
    if (into_tier) {
      host_tier_.used_blocks += moved;
      out_.host_tier_peak_bytes = std::max(out_.host_tier_peak_bytes, host_tier_.used_blocks * block_bytes_);
    } else {
      swapped_blocks_ += moved;
      out_.peak_swap_bytes = std::max(out_.peak_swap_bytes, static_cast<double>(swapped_blocks_) * block_bytes_);
    }
    release_prefix(q);
    q.blocks = moved;
    q.swapped = true;
  } else {
    used_ -= q.blocks;
    q.blocks = 0;
    release_prefix(q);
    // Recompute: the prompt and everything generated so far are prefilled again.
    q.prompt = q.prompt + q.generated;
    q.generated = 0;
    q.prefilled = 0;
    ++r.preemptions;
    ++out_.preemptions;
  }
  waiting_.push_front(q);
}

void BatchScheduler::reject_front() {
  const std::size_t record = waiting_.front().record;
  out_.requests[record].finish_s = -2;
  ++out_.rejected;
  waiting_.pop_front();
  if (on_finish) on_finish(record);
}

inline bool BatchScheduler::done(const Sequence& q) const {
  if (role_ == InstanceRole::prefill) return q.prefilled >= q.prompt && q.generated > 0;  // handed to decode
  const int total_generated = q.generated + (q.prompt - q.original_prompt);  // tokens recomputed count as generated
  return q.prefilled >= q.prompt && total_generated >= q.output_tokens;
}

bool BatchScheduler::token(Sequence& q, double now) {
  if (!q.produced) {
    // A prefill instance's first token reaches the client from the decode instance, after the
    // transfer (the deployment records it then).
    if (role_ != InstanceRole::prefill) out_.requests[q.record].first_token_s = now;
    q.produced = true;
  } else {
    out_.inter_token_s.add(static_cast<float>(now - q.last_token_s));
  }
  q.last_token_s = now;
  ++q.generated;
  return done(q);
}

void BatchScheduler::finish_done(double now) {
  for (auto at = running_.begin(); at != running_.end();) {
    Sequence& q = *at;
    if (done(q)) {
      if (role_ != InstanceRole::prefill) out_.requests[q.record].finish_s = now;
      used_ -= q.blocks;
      release_prefix(q);
      const std::size_t record = q.record;
      at = running_.erase(at);
      if (on_finish) on_finish(record);  // arrivals join the waiting queue: `at` stays valid
    } else {
      ++at;
    }
  }
}

}  // namespace memtwin
