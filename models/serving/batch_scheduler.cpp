#include "models/serving/batch_scheduler.h"

#include <algorithm>
#include <cmath>

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
  }
  for (std::int64_t v : {capacity_blocks, std::int64_t{sv.replicas}, std::int64_t{sv.max_num_seqs},
                         std::int64_t{sv.max_num_batched_tokens}, std::int64_t{sv.block_size}, std::int64_t{sv.chunked_prefill},
                         static_cast<std::int64_t>(sv.preemption), static_cast<std::int64_t>(s.inference->kv_cache.compression.method)})
    f.add(v);
  f.add(block_bytes);
  return f.hex();
}

BatchScheduler::BatchScheduler(int replica, const Scenario& s, const KvCompressor& kv, ServingRun& out,
                               std::int64_t capacity_blocks, double block_bytes)
    : index_(replica), s_(s), kv_(kv), out_(out), capacity_(capacity_blocks), block_bytes_(block_bytes),
      last_token_(out.requests.size(), 0.0) {}

void BatchScheduler::enqueue(std::size_t record, int prompt) { waiting_.push_back(Sequence{record, prompt, 0, 0, 0, false}); }

std::optional<ScheduledIteration> BatchScheduler::schedule() {
  const ServingSpec& sv = s_.inference->serving;
  ScheduledIteration it;
  for (;;) {
    if (waiting_.empty() && running_.empty()) return std::nullopt;
    it.decoding.clear();
    it.prefilling.clear();
    it.chunks.clear();
    it.load = IterationLoad{};
    int budget = sv.max_num_batched_tokens;
    // Decodes first (one token each); a sequence that needs a block when none is free preempts
    // the newest running sequence (vLLM's policy), possibly itself.
    for (std::size_t i = 0; i < running_.size() && budget > 0;) {
      Sequence& q = running_[i];
      if (q.prefilled < q.prompt) {
        ++i;
        continue;
      }
      const std::int64_t need = blocks_for(q, q.prefilled, q.generated + 1) - q.blocks;
      while (need > capacity_ - used_ && !running_.empty()) {
        const bool self = &running_.back() == &q;
        preempt_newest(it);
        if (self) break;
      }
      if (i >= running_.size() || &running_[i] != &q) continue;  // q itself was preempted
      if (need > capacity_ - used_) break;
      grow(q, q.blocks + need);
      it.decoding.push_back(&q);
      --budget;
      ++i;
    }
    // Prefills: running sequences mid-prompt, then admission from the waiting queue.
    auto try_prefill = [&](Sequence& q, bool admitting) {
      if (budget <= 0 || static_cast<int>(it.decoding.size() + it.prefilling.size()) >= sv.max_num_seqs) return false;
      const int remaining = q.prompt - q.prefilled;
      const int chunk = sv.chunked_prefill ? std::min(remaining, budget) : remaining;
      if (chunk > budget) return false;
      const std::int64_t target = blocks_for(q, q.prefilled + chunk, 0);
      const std::int64_t watermark = admitting ? static_cast<std::int64_t>(std::ceil(0.01 * capacity_)) : 0;
      if (target - q.blocks > capacity_ - used_ - watermark) return false;
      grow(q, target);
      it.load.prefill_attention += chunk * (q.prefilled + chunk / 2.0);
      it.load.prefill_tokens += chunk;
      if (q.prefilled + chunk >= q.prompt) ++it.load.prefills_completing;
      budget -= chunk;
      it.prefilling.push_back(&q);
      it.chunks.push_back(chunk);
      return true;
    };
    for (auto& q : running_) {
      if (q.prefilled < q.prompt) try_prefill(q, false);
    }
    while (!waiting_.empty()) {
      Sequence& q = waiting_.front();
      const std::int64_t watermark = static_cast<std::int64_t>(std::ceil(0.01 * capacity_));
      if (q.swapped) {
        // Swapped out while decoding: its blocks come back over PCIe, then it decodes again.
        if (q.blocks > capacity_ - used_ - watermark) break;
        it.swap_in_bytes += q.blocks * block_bytes_;
        swapped_in_bytes_ += q.blocks * block_bytes_;
        used_ += q.blocks;
        out_.peak_blocks_used = std::max(out_.peak_blocks_used, used_);
        q.swapped = false;
        running_.push_back(q);
        waiting_.pop_front();
        continue;
      }
      if (blocks_for(q, q.prompt, 0) > capacity_ - watermark) {  // can never fit: reject
        out_.requests[q.record].finish_s = -2;
        ++out_.rejected;
        const std::size_t record = q.record;
        waiting_.pop_front();
        if (on_finish) on_finish(record);
        continue;
      }
      if (!try_prefill(q, true)) break;
      running_.push_back(q);
      it.prefilling.back() = &running_.back();
      waiting_.pop_front();
    }
    if (!it.decoding.empty() || !it.prefilling.empty()) break;
    // Nothing fits even alone: the newest running sequence gives way, or we wait.
    if (running_.empty()) return std::nullopt;
    preempt_newest(it);
  }
  for (const Sequence* q : it.decoding) {
    it.load.decode_sequences += 1;
    it.load.decode_context += static_cast<double>(kv_.kept_tokens(q->prompt, q->generated));
    it.load.kv_bytes_read += kv_.sequence_bytes(q->prompt, q->generated);
  }
  return it;
}

void BatchScheduler::complete(const ScheduledIteration& it, double started, double now) {
  ++out_.iterations;
  if (out_.iteration_log.size() < ServingRun::kMaxLoggedIterations) {
    out_.iteration_log.push_back({index_, started, now, it.load.decode_sequences, it.load.prefill_tokens});
  }
  for (Sequence* q : it.decoding) token(*q, now);
  for (std::size_t i = 0; i < it.prefilling.size(); ++i) {
    Sequence& q = *it.prefilling[i];
    q.prefilled += it.chunks[i];
    if (q.prefilled == q.prompt && q.generated == 0) token(q, now);  // the first token ends the prefill
  }
  finish_done(now);
  if (index_ == 0) {
    out_.kv_timeline.push_back({now, static_cast<double>(used_) / capacity_, swapped_out_bytes_, swapped_in_bytes_});
  }
}

std::int64_t BatchScheduler::blocks_for(const Sequence& q, int prefilled, int generated) const {
  // Prefill holds what the method needs while prefilling (the whole prompt for methods that
  // select afterwards); decoding holds the compressed footprint.
  double bytes = kv_.prefill_bytes(prefilled);
  if (prefilled >= q.prompt) bytes = std::max(bytes, kv_.sequence_bytes(q.prompt, generated));
  if (prefilled >= q.prompt && generated > 0) bytes = kv_.sequence_bytes(q.prompt, generated);
  return static_cast<std::int64_t>(std::ceil(bytes / block_bytes_));
}

void BatchScheduler::grow(Sequence& q, std::int64_t blocks) {
  used_ += blocks - q.blocks;
  q.blocks = blocks;
  out_.peak_blocks_used = std::max(out_.peak_blocks_used, used_);
}

void BatchScheduler::preempt_newest(ScheduledIteration& it) {
  Sequence q = running_.back();
  running_.pop_back();
  RequestRecord& r = out_.requests[q.record];
  if (s_.inference->serving.preemption == Preemption::swap) {
    it.swap_out_bytes += q.blocks * block_bytes_;
    out_.swap_bytes += 2 * q.blocks * block_bytes_;  // out now, in later
    swapped_out_bytes_ += q.blocks * block_bytes_;
    ++r.swaps;
    ++out_.swaps;
    used_ -= q.blocks;  // the blocks live in host memory meanwhile
    q.swapped = true;
  } else {
    used_ -= q.blocks;
    q.blocks = 0;
    // Recompute: the prompt and everything generated so far are prefilled again.
    q.prompt = q.prompt + q.generated;
    q.generated = 0;
    q.prefilled = 0;
    ++r.preemptions;
    ++out_.preemptions;
  }
  waiting_.push_front(q);
}

void BatchScheduler::token(Sequence& q, double now) {
  RequestRecord& r = out_.requests[q.record];
  if (r.first_token_s < 0) {
    r.first_token_s = now;
  } else {
    out_.inter_token_s.push_back(static_cast<float>(now - last_token_[q.record]));
  }
  last_token_[q.record] = now;
  ++q.generated;
}

void BatchScheduler::finish_done(double now) {
  for (std::size_t i = 0; i < running_.size();) {
    Sequence& q = running_[i];
    RequestRecord& r = out_.requests[q.record];
    const int total_generated = q.generated + (q.prompt - r.prompt_tokens);  // tokens recomputed count as generated
    if (q.prefilled >= q.prompt && total_generated >= r.output_tokens) {
      r.finish_s = now;
      used_ -= q.blocks;
      const std::size_t record = q.record;
      running_.erase(running_.begin() + static_cast<long>(i));
      if (on_finish) on_finish(record);
    } else {
      ++i;
    }
  }
}

}  // namespace memtwin
