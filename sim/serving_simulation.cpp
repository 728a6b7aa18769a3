#include "sim/serving_simulation.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <memory>

#include <simgrid/s4u.hpp>

#include "models/memory/serving_memory.h"
#include "models/serving/iteration_cost.h"
#include "models/serving/request_stream.h"
#include "sim/engine_setup.h"

namespace memtwin::sim {

namespace sg4 = simgrid::s4u;

namespace {

struct Sequence {
  std::size_t record = 0;   // index into the result's requests
  int prompt = 0;           // tokens to prefill (prompt, plus generated ones after a recompute)
  int prefilled = 0;
  int generated = 0;
  std::int64_t blocks = 0;
  bool swapped = false;
};

class Replica {
 public:
  Replica(int index, const Scenario& s, const IterationModel& model, const KvCompressor& kv, ServingSimulation& out,
          std::int64_t capacity_blocks, double block_bytes)
      : index_(index), s_(s), model_(model), kv_(kv), out_(out), capacity_(capacity_blocks), block_bytes_(block_bytes),
        last_token_(out.requests.size(), 0.0) {}

  void enqueue(std::size_t record, int prompt) {
    waiting_.push_back(Sequence{record, prompt, 0, 0, 0, false});
    if (idle_actor_) {
      auto a = idle_actor_;
      idle_actor_ = nullptr;
      a->resume();
    }
  }
  [[nodiscard]] std::size_t outstanding() const { return waiting_.size() + running_.size(); }
  [[nodiscard]] std::int64_t used_blocks() const { return used_; }
  void close() {
    closed_ = true;
    if (idle_actor_) {
      auto a = idle_actor_;
      idle_actor_ = nullptr;
      a->resume();
    }
  }
  std::function<void(std::size_t)> on_finish;  // closed-loop workloads issue the next request

  void run() {
    const ServingSpec& sv = s_.inference->serving;
    for (;;) {
      if (waiting_.empty() && running_.empty()) {
        if (closed_) return;
        idle_actor_ = sg4::Actor::self();
        sg4::this_actor::suspend();
        continue;
      }
      IterationLoad load;
      double extra_s = 0;
      std::vector<Sequence*> decoding, prefilling;
      std::vector<int> chunks;
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
          extra_s += preempt_newest();
          if (self) break;
        }
        if (i >= running_.size() || &running_[i] != &q) continue;  // q itself was preempted
        if (need > capacity_ - used_) break;
        grow(q, q.blocks + need);
        decoding.push_back(&q);
        --budget;
        ++i;
      }
      // Prefills: running sequences mid-prompt, then admission from the waiting queue.
      auto try_prefill = [&](Sequence& q, bool admitting) {
        if (budget <= 0 || static_cast<int>(decoding.size() + prefilling.size()) >= sv.max_num_seqs) return false;
        const int remaining = q.prompt - q.prefilled;
        const int chunk = sv.chunked_prefill ? std::min(remaining, budget) : remaining;
        if (chunk > budget) return false;
        const std::int64_t target = blocks_for(q, q.prefilled + chunk, 0);
        const std::int64_t watermark = admitting ? static_cast<std::int64_t>(std::ceil(0.01 * capacity_)) : 0;
        if (target - q.blocks > capacity_ - used_ - watermark) return false;
        grow(q, target);
        load.prefill_attention += chunk * (q.prefilled + chunk / 2.0);
        load.prefill_tokens += chunk;
        budget -= chunk;
        prefilling.push_back(&q);
        chunks.push_back(chunk);
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
          extra_s += q.blocks * block_bytes_ / s_.cluster.host.pcie_bandwidth.value();
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
        prefilling.back() = &running_.back();
        waiting_.pop_front();
      }
      if (decoding.empty() && prefilling.empty()) {
        // Nothing fits even alone: the newest running sequence gives way, or we wait.
        if (!running_.empty()) {
          extra_s += preempt_newest();
          continue;
        }
        idle_actor_ = sg4::Actor::self();
        sg4::this_actor::suspend();
        continue;
      }
      for (Sequence* q : decoding) {
        load.decode_sequences += 1;
        load.decode_context += static_cast<double>(kv_.kept_tokens(q->prompt, q->generated));
        load.kv_bytes_read += kv_.sequence_bytes(q->prompt, q->generated);
      }
      const double began = sg4::Engine::get_clock();
      sg4::this_actor::sleep_for(model_.seconds(load) + extra_s);
      ++out_.iterations;
      const double now = sg4::Engine::get_clock();
      if (out_.iteration_log.size() < ServingSimulation::kMaxLoggedIterations) {
        out_.iteration_log.push_back({index_, began, now, load.decode_sequences, load.prefill_tokens});
      }
      for (Sequence* q : decoding) token(*q, now);
      for (std::size_t i = 0; i < prefilling.size(); ++i) {
        Sequence& q = *prefilling[i];
        q.prefilled += chunks[i];
        if (q.prefilled == q.prompt && q.generated == 0) token(q, now);  // the first token ends the prefill
      }
      finish_done(now);
      if (index_ == 0) out_.kv_timeline.push_back({now, static_cast<double>(used_) / capacity_, swapped_out_bytes_, swapped_in_bytes_});
    }
  }

 private:
  std::int64_t blocks_for(const Sequence& q, int prefilled, int generated) const {
    // Prefill holds what the method needs while prefilling (the whole prompt for methods that
    // select afterwards); decoding holds the compressed footprint.
    double bytes = kv_.prefill_bytes(prefilled);
    if (prefilled >= q.prompt) bytes = std::max(bytes, kv_.sequence_bytes(q.prompt, generated));
    if (prefilled >= q.prompt && generated > 0) bytes = kv_.sequence_bytes(q.prompt, generated);
    return static_cast<std::int64_t>(std::ceil(bytes / block_bytes_));
  }

  void grow(Sequence& q, std::int64_t blocks) {
    used_ += blocks - q.blocks;
    q.blocks = blocks;
    out_.peak_blocks_used = std::max(out_.peak_blocks_used, used_);
  }

  // Preempts the newest running sequence; returns the seconds a swap-out takes.
  double preempt_newest() {
    Sequence q = running_.back();
    running_.pop_back();
    RequestRecord& r = out_.requests[q.record];
    double seconds = 0;
    if (s_.inference->serving.preemption == Preemption::swap) {
      seconds = q.blocks * block_bytes_ / s_.cluster.host.pcie_bandwidth.value();
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
    return seconds;
  }

  void token(Sequence& q, double now) {
    RequestRecord& r = out_.requests[q.record];
    if (r.first_token_s < 0) {
      r.first_token_s = now;
    } else {
      out_.inter_token_s.push_back(static_cast<float>(now - last_token_[q.record]));
    }
    last_token_[q.record] = now;
    ++q.generated;
  }

  void finish_done(double now) {
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

  int index_;
  const Scenario& s_;
  const IterationModel& model_;
  const KvCompressor& kv_;
  ServingSimulation& out_;
  std::int64_t capacity_, used_ = 0;
  double swapped_out_bytes_ = 0, swapped_in_bytes_ = 0;  // this replica's host-tier traffic so far
  double block_bytes_;
  std::deque<Sequence> waiting_;
  std::deque<Sequence> running_;
  std::vector<double> last_token_;  // by request record
  sg4::ActorPtr idle_actor_;
  bool closed_ = false;
};

}  // namespace

ServingSimulation simulate_serving(const Scenario& s) {
  const Inference& inf = *s.inference;
  ServingSimulation out;
  const ServingMemory memory = serving_memory(s);
  out.capacity_blocks = memory.capacity_blocks;
  const std::vector<Request> requests = generate_requests(inf, s.seed);
  out.requests.resize(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    RequestRecord& r = out.requests[i];
    r.id = requests[i].id;
    r.prompt_tokens = requests[i].prompt_tokens;
    r.output_tokens = requests[i].output_tokens;
    r.arrival_s = requests[i].arrival_s;
  }
  auto engine = make_engine();
  auto* zone = sg4::create_full_zone("serving");
  std::vector<sg4::Host*> hosts;
  for (int r = 0; r < inf.serving.replicas; ++r) hosts.push_back(zone->create_host("replica" + std::to_string(r), 1e9));
  zone->seal();

  const IterationModel model(s);
  const KvShape shape = serving_kv_shape(s);
  auto kv = make_kv_compressor(inf.kv_cache.compression, shape);
  std::vector<std::unique_ptr<Replica>> replicas;
  for (int r = 0; r < inf.serving.replicas; ++r) {
    replicas.push_back(std::make_unique<Replica>(r, s, model, *kv, out, std::max<std::int64_t>(1, memory.capacity_blocks),
                                                 memory.block_bytes.as_double()));
  }
  std::size_t round_robin = 0;
  auto route = [&](std::size_t record) {
    std::size_t pick = 0;
    switch (inf.serving.router) {
      case Router::round_robin: pick = round_robin++ % replicas.size(); break;
      case Router::least_outstanding:
        for (std::size_t i = 1; i < replicas.size(); ++i)
          if (replicas[i]->outstanding() < replicas[pick]->outstanding()) pick = i;
        break;
      case Router::least_kv:
        for (std::size_t i = 1; i < replicas.size(); ++i)
          if (replicas[i]->used_blocks() < replicas[pick]->used_blocks()) pick = i;
        break;
    }
    out.requests[record].replica = static_cast<int>(pick);
    out.requests[record].arrival_s = sg4::Engine::get_clock();
    replicas[pick]->enqueue(record, out.requests[record].prompt_tokens);
  };

  const bool closed_loop = inf.workload.arrival == Arrival::closed_loop && inf.workload.trace.empty();
  std::size_t next = 0, finished = 0;
  for (auto& r : replicas) {
    r->on_finish = [&](std::size_t) {  // a completion or a rejection
      ++finished;
      if (closed_loop && next < out.requests.size()) route(next++);
      if (finished >= out.requests.size()) {
        for (auto& other : replicas) other->close();
      }
    };
  }
  sg4::Actor::create("router", hosts[0], [&] {
    if (closed_loop) {
      const std::size_t initial = std::min<std::size_t>(inf.workload.concurrency, out.requests.size());
      while (next < initial) route(next++);
    } else {
      for (; next < out.requests.size(); ++next) {
        const double wait = out.requests[next].arrival_s - sg4::Engine::get_clock();
        if (wait > 0) sg4::this_actor::sleep_for(wait);
        route(next);
      }
      out.last_arrival_s = sg4::Engine::get_clock();
    }
    if (out.requests.empty()) for (auto& other : replicas) other->close();
  });
  for (std::size_t r = 0; r < replicas.size(); ++r) {
    sg4::Actor::create("replica" + std::to_string(r), hosts[r], [&, r] { replicas[r]->run(); });
  }
  engine->run();
  out.makespan_s = sg4::Engine::get_clock();
  if (closed_loop) out.last_arrival_s = out.makespan_s;
  return out;
}

}  // namespace memtwin::sim
