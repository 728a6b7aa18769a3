#pragma once
// vLLM-style continuous batching for one replica, as plain logic that any clock can drive: the
// simulator sleeps each iteration's roofline time in SimGrid, the hardware backend runs the
// iteration's kernels and reads the wall clock. Both make the same decisions from the same code.
//
// Each iteration: decodes first (one token each), then prefills (running sequences mid-prompt, then
// admissions from the waiting queue) within max_num_batched_tokens and max_num_seqs; paged KV
// blocks sized by the scenario's compressor, with a 1% free-block watermark on admission; when a
// decode needs a block and none is free, the newest running sequence is preempted (recompute, or
// swap to host memory over PCIe), possibly the decoding one itself. A prompt that can never fit is
// rejected. With `prefix_caching`, the full blocks of a shared prompt prefix are computed once and
// shared (vLLM's automatic prefix caching): a request whose group's prefix is cached skips its
// prefill, and the blocks stay cached after their last user finishes, evicted least recently used
// first when blocks run out. Prefixes are shared only in caches whose blocks hold whole tokens
// (uncompressed or group-quantised: methods that select per sequence keep private copies). With
// KV tiers (`inference.tiers`), a prefix evicted from the GPU moves to host memory, and from there
// to NVMe when host memory is full, instead of being dropped; a request whose prefix is in a lower
// tier fetches it back before its prefill (over PCIe; NVMe reads first), and the moves cost the
// iteration their transfer time. Which prefix leaves a tier first: least recently used, or least
// frequently used (`inference.tiers.policy`).
//
// Contract: `schedule` then `complete` for each iteration, nothing else in between except
// `enqueue` (arrivals); the Sequence pointers of an Iteration stay valid until `complete`.
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "models/kv/kv_method.h"
#include "models/scenario.h"
#include "models/serving/iteration_cost.h"
#include "models/serving/request_stream.h"
#include "models/serving/serving_run.h"

namespace memtwin {

struct Sequence {
  std::size_t record = 0;  ///< index into the run's requests
  int prompt = 0;          ///< tokens to prefill (prompt, plus generated ones after a recompute)
  int prefilled = 0;
  int generated = 0;
  std::int64_t blocks = 0;  ///< KV blocks of its own
  std::int64_t shared = 0;  ///< blocks of a cached shared prefix it reads (counted once, in the cache)
  bool swapped = false;
  bool transferred = false;  ///< a decode instance's: its prompt's KV arrived from a prefill instance
  /// Its request's output tokens and how many prompt tokens it had (copied at enqueue: the
  /// scheduler checks them every iteration, and a million requests' records are not in cache).
  int output_tokens = 0, original_prompt = 0;
  bool produced = false;    ///< has produced its first token
  double last_token_s = 0;  ///< when it produced its latest token
};

/// Cached-prefix KV moved between tiers around one iteration (bytes per GPU of the replica: each
/// GPU moves its part of every block over its own PCIe link; a node's NVMe serves all). A backend
/// with a network model runs them as transfers: fetches (NVMe read, then PCIe) and offloads
/// before the iteration, NVMe demotions and proactive copies in the background.
struct TierTransfers {
  double gpu_to_host = 0;             ///< prefixes evicted from the GPU into host memory
  double host_to_gpu = 0;             ///< prefixes fetched back (from host memory, or NVMe via host)
  double nvme_to_host = 0;            ///< the NVMe part of those fetches, read before the PCIe copy
  double host_to_nvme = 0;            ///< prefixes demoted from host memory to NVMe (background)
  double background_gpu_to_host = 0;  ///< proactive copies of idle prefixes (background)
  /// Seconds if the foreground ones ran alone at their links' bandwidth one after another, for
  /// drivers without a network model (`gpus`: the replica's, whose parts the NVMe serves).
  [[nodiscard]] double serial_seconds(const Cluster& cluster, int gpus = 1) const;
};

/// One iteration's batch and what it costs besides compute.
struct ScheduledIteration {
  IterationLoad load;
  std::vector<Sequence*> decoding;
  std::vector<Sequence*> prefilling;
  std::vector<int> chunks;          ///< prompt tokens each prefilling sequence computes
  double swap_out_bytes = 0;        ///< KV moved to host memory before the iteration (preemption by swap), per GPU
  double swap_in_bytes = 0;         ///< KV brought back, per GPU
  TierTransfers tier;               ///< cached prefixes moved between tiers
};

/// The run's request records for these requests, in order.
ServingRun start_serving_run(const std::vector<Request>& requests);

/// What a serving run executes, as 16 hex digits: the request stream, the KV geometry and the
/// scheduler's limits. A simulated and a measured run of the same scenario share it (the
/// training Plan's hash plays this part for steps).
std::string serving_plan_hash(const Scenario& scenario, const std::vector<Request>& requests, std::int64_t capacity_blocks,
                              double block_bytes);

class BatchScheduler {
 public:
  /// `virtual_engine` of `virtual_engines`: which of a pipelined replica's schedulers this is (vLLM
  /// runs one per stage; the caller gives each its share of the blocks, and the swap space and
  /// tiers are shared out here). The KV timeline follows replica 0's first.
  BatchScheduler(int replica, const Scenario& scenario, const KvCompressor& kv, ServingRun& out,
                 std::int64_t capacity_blocks, double block_bytes, int virtual_engine = 0, int virtual_engines = 1);

  void enqueue(std::size_t record, int prompt);
  [[nodiscard]] std::size_t outstanding() const { return waiting_.size() + running_.size(); }
  /// KV blocks in use (cached prefixes without users are evictable, so not in use).
  [[nodiscard]] std::int64_t used_blocks() const { return used_ - idle_prefix_blocks_; }
  /// Sequences holding KV blocks now (swapped ones hold none).
  [[nodiscard]] const std::deque<Sequence>& running() const { return running_; }
  /// The shared prefixes cached on the GPU now, by prefix group: their blocks (a sequence with
  /// `shared` blocks reads the first `shared` of its group's).
  [[nodiscard]] std::map<int, std::int64_t> cached_prefix_blocks() const;

  /// The next batch, or nothing when no sequence can run now (none outstanding, or none fits and
  /// none is running to give way): wait for an arrival.
  std::optional<ScheduledIteration> schedule();
  /// The iteration ran from `started` to `now`: its tokens are produced and finished sequences leave.
  void complete(const ScheduledIteration& iteration, double started, double now);

  /// Called for each completed or rejected request (closed-loop workloads issue the next one); on
  /// a disaggregated prefill instance, for each prompt prefilled (its first token produced: the
  /// KV cache leaves for a decode instance) or rejected.
  std::function<void(std::size_t)> on_finish;
  /// Called from schedule() for each request whose prompt starts its prefill in the iteration
  /// scheduled (again after a recompute preemption).
  std::function<void(std::size_t)> on_prefill_start;

 private:
  /// The KV bytes `q` holds with `prefilled` prompt tokens computed and `generated` produced.
  [[nodiscard]] double kv_bytes(const Sequence& q, int prefilled, int generated) const;
  /// The blocks that hold `bytes`.
  [[nodiscard]] std::int64_t blocks_of(double bytes) const;
  [[nodiscard]] std::int64_t blocks_for(const Sequence& q, int prefilled, int generated) const {
    return blocks_of(kv_bytes(q, prefilled, generated));
  }
  /// Grows `q` to `total` blocks (shared ones included), evicting cached prefixes if it must.
  void grow(Sequence& q, std::int64_t total);
  /// Blocks free for new allocations (cached prefixes nobody uses count as free: evictable).
  [[nodiscard]] std::int64_t free_blocks() const { return capacity_ - used_ + idle_prefix_blocks_; }
  void note_peak() { out_.peak_blocks_used = std::max(out_.peak_blocks_used, used_blocks()); }
  /// A fresh sequence of a prefix group joins the group's cached prefix, or starts one.
  void attach_prefix(Sequence& q);
  void release_prefix(Sequence& q);
  void evict_cached_prefixes(std::int64_t blocks);
  /// A prefix leaving the GPU: to host memory if there is a host tier (demoting to NVMe, or
  /// dropping, what no longer fits there), else dropped.
  /// `background`: a proactive copy of a prefix that stays on the GPU too.
  void offload_prefix(int group, std::int64_t blocks, std::uint64_t uses, bool background = false);
  /// Frees host-tier room for `blocks` by moving its first-leaving prefixes down to NVMe (or away);
  /// false when even that cannot (swapped-out sequences' KV fills it).
  bool make_host_room(std::int64_t blocks);
  /// Whether a lower tier holds a copy of `group`'s prefix.
  [[nodiscard]] bool stored_below(int group) const;
  struct StoredPrefix;
  /// The prefix of `group` from a lower tier, if one holds it (it leaves the tier).
  std::optional<StoredPrefix> fetch_prefix(int group);
  void preempt_newest(ScheduledIteration& it);
  /// The waiting queue's first request can never fit: rejected (finish_s -2), and reported.
  void reject_front();
  /// Records q's next token; whether q has now produced all it will.
  bool token(Sequence& q, double now);
  [[nodiscard]] bool done(const Sequence& q) const;
  void finish_done(double now);

  int index_;
  int virtual_engine_;
  InstanceRole role_;
  std::int64_t kv_iterations_ = 0;  ///< this engine's iterations so far, numbering its KV samples
  const Scenario& s_;
  const KvCompressor& kv_;
  const double uniform_token_bytes_;  ///< kv_.uniform_token_bytes(): nonzero when every token is kept alike
  ServingRun& out_;
  std::int64_t capacity_, used_ = 0;
  double swapped_out_bytes_ = 0, swapped_in_bytes_ = 0;  // this replica's host-tier traffic so far
  // vLLM's swap space: host memory per GPU for swapped-out blocks (a block of the replica takes
  // block_bytes on each GPU, so the space holds swap_space / block_bytes of them).
  std::int64_t swap_capacity_blocks_ = 0, swapped_blocks_ = 0;
  double block_bytes_;
  std::deque<Sequence> waiting_;
  std::deque<Sequence> running_;

  // The prefix cache: per group, its shared blocks, how many sequences read them, whether their
  // KV is computed yet (its first sequence prefilled past them), and when last used (for LRU).
  struct CachedPrefix {
    std::int64_t blocks = 0;
    int users = 0;
    bool ready = false;
    std::uint64_t last_use = 0;
    std::uint64_t uses = 0;  ///< sequences that attached to it (for least-frequently-used)
  };
  /// A prefix held in a lower tier.
  struct StoredPrefix {
    std::int64_t blocks = 0;
    std::uint64_t last_use = 0, uses = 0;
  };
  struct Tier {
    std::int64_t capacity_blocks = 0, used_blocks = 0;
    std::map<int, StoredPrefix> prefixes;
  };
  std::map<int, StoredPrefix>::iterator first_leaver(Tier& tier) const;
  /// Whether `a` leaves a tier before `b` under the policy.
  [[nodiscard]] bool leaves_first(std::uint64_t a_last_use, std::uint64_t a_uses, std::uint64_t b_last_use,
                                  std::uint64_t b_uses) const;
  Tier host_tier_, nvme_tier_;
  TierTransfers pending_tier_;
  bool share_prefixes_ = false;
  std::map<int, CachedPrefix> prefixes_;
  std::int64_t idle_prefix_blocks_ = 0;  // blocks of cached prefixes without users (evictable, inside used_)
  std::uint64_t clock_ = 0;
};

}  // namespace memtwin
