// BatchScheduler's prefix cache and the tiers below the GPU: sharing a cached prefix, evicting
// idle ones, moving them to host memory and NVMe and back (batch_scheduler.h). The batching,
// preemption and token bookkeeping are in batch_scheduler.cpp.
#include <algorithm>

#include "models/serving/batch_scheduler.h"

namespace memtwin {

std::map<int, std::int64_t> BatchScheduler::cached_prefix_blocks() const {
  std::map<int, std::int64_t> out;
  for (const auto& [group, prefix] : prefixes_) out[group] = prefix.blocks;
  return out;
}

void BatchScheduler::attach_prefix(Sequence& q) {
  const RequestRecord& r = out_.requests[q.record];
  if (!share_prefixes_ || r.prefix_group < 0) return;
  const int block_size = s_.inference->serving.block_size;
  // Whole blocks only, and never the prompt's last token (it is computed to sample the first one).
  const std::int64_t shareable = std::min(r.prefix_tokens, q.prompt - 1) / block_size;
  if (shareable <= 0) return;
  auto p = prefixes_.find(r.prefix_group);
  const bool created = p == prefixes_.end();
  if (created) {
    // Not on the GPU: fetched back from a lower tier if one holds it, else the first of its group
    // computes it and others share it once it is done. Make room first (eviction must not see the
    // new entry, which has no blocks yet).
    if (shareable > free_blocks()) return;
    evict_cached_prefixes(shareable);
    const auto fetched = fetch_prefix(r.prefix_group);
    if (fetched) evict_cached_prefixes(fetched->blocks);
    p = prefixes_.emplace(r.prefix_group, CachedPrefix{}).first;
    p->second.blocks = fetched ? fetched->blocks : shareable;
    p->second.ready = fetched.has_value();
    p->second.uses = fetched ? fetched->uses : 0;
    used_ += p->second.blocks;
  } else if (!p->second.ready) {
    return;  // its first sequence is still computing it: no sharing yet
  } else if (p->second.users == 0) {
    idle_prefix_blocks_ -= p->second.blocks;  // back in use
  }
  CachedPrefix& c = p->second;
  const bool hit = !created || c.ready;  // found on the GPU, or fetched from a lower tier
  if (hit) {
    // A cache hit: the prefix's tokens are not prefilled again.
    const int tokens = static_cast<int>(std::min<std::int64_t>(c.blocks, shareable) * block_size);
    q.prefilled = tokens;
    out_.requests[q.record].cached_tokens += tokens;
  }
  q.shared = hit ? std::min<std::int64_t>(c.blocks, shareable) : shareable;
  ++c.users;
  ++c.uses;
  c.last_use = ++clock_;
  note_peak();
}

void BatchScheduler::release_prefix(Sequence& q) {
  if (q.shared == 0) return;
  auto p = prefixes_.find(out_.requests[q.record].prefix_group);
  q.shared = 0;
  if (p == prefixes_.end()) return;
  CachedPrefix& c = p->second;
  if (--c.users > 0) return;
  if (!c.ready) {  // nobody finished computing it: nothing worth keeping
    used_ -= c.blocks;
    prefixes_.erase(p);
    return;
  }
  idle_prefix_blocks_ += c.blocks;  // kept, evictable
  c.last_use = ++clock_;
  // Proactive offload: copy an idle prefix to host memory now, in the background, so that its
  // eviction later moves nothing while a request waits.
  if (s_.inference->tiers.proactive_offload && host_tier_.capacity_blocks > 0 && !stored_below(p->first)) {
    offload_prefix(p->first, c.blocks, c.uses, true);
  }
}

bool BatchScheduler::leaves_first(std::uint64_t a_last_use, std::uint64_t a_uses, std::uint64_t b_last_use,
                                  std::uint64_t b_uses) const {
  if (s_.inference->tiers.policy == TierPolicy::lfu && a_uses != b_uses) return a_uses < b_uses;
  return a_last_use < b_last_use;  // LRU, and LFU's tie-break
}

void BatchScheduler::evict_cached_prefixes(std::int64_t blocks) {
  // Cached prefixes without users hold blocks that count as used; they leave the GPU (for a lower
  // tier, or for good) in policy order until `blocks` more fit beside everything in use.
  while (blocks > 0 && capacity_ - used_ < blocks && idle_prefix_blocks_ > 0) {
    auto victim = prefixes_.end();
    for (auto p = prefixes_.begin(); p != prefixes_.end(); ++p) {
      if (p->second.users != 0) continue;
      if (victim == prefixes_.end() ||
          leaves_first(p->second.last_use, p->second.uses, victim->second.last_use, victim->second.uses))
        victim = p;
    }
    if (victim == prefixes_.end()) break;
    used_ -= victim->second.blocks;
    idle_prefix_blocks_ -= victim->second.blocks;
    ++out_.prefix_cache_evictions;
    // A proactive copy already below: leaving the GPU costs nothing.
    if (!stored_below(victim->first)) offload_prefix(victim->first, victim->second.blocks, victim->second.uses);
    prefixes_.erase(victim);
  }
}

std::map<int, BatchScheduler::StoredPrefix>::iterator BatchScheduler::first_leaver(Tier& tier) const {
  auto victim = tier.prefixes.begin();
  for (auto p = tier.prefixes.begin(); p != tier.prefixes.end(); ++p)
    if (leaves_first(p->second.last_use, p->second.uses, victim->second.last_use, victim->second.uses)) victim = p;
  return victim;
}

double TierTransfers::serial_seconds(const Cluster& cluster, int gpus) const {
  const double pcie = cluster.host.pcie_bandwidth.value();
  double seconds = (gpu_to_host + host_to_gpu) / pcie;
  if (cluster.nvme) {
    seconds += gpus * (nvme_to_host / cluster.nvme->read_bandwidth.value() + host_to_nvme / cluster.nvme->write_bandwidth.value());
  }
  return seconds;
}

bool BatchScheduler::stored_below(int group) const {
  return host_tier_.prefixes.count(group) > 0 || nvme_tier_.prefixes.count(group) > 0;
}

bool BatchScheduler::make_host_room(std::int64_t blocks) {
  // Host memory's first-leaving prefixes go down to NVMe when it can take them, else away; the KV
  // of swapped-out sequences stays (it is needed back).
  while (host_tier_.capacity_blocks - host_tier_.used_blocks < blocks) {
    if (host_tier_.prefixes.empty()) return false;
    const auto victim = first_leaver(host_tier_);
    const int moved_group = victim->first;
    const StoredPrefix moved = victim->second;
    host_tier_.used_blocks -= moved.blocks;
    host_tier_.prefixes.erase(victim);
    if (moved.blocks > nvme_tier_.capacity_blocks) {
      ++out_.prefixes_dropped;
      continue;
    }
    while (nvme_tier_.capacity_blocks - nvme_tier_.used_blocks < moved.blocks) {
      const auto gone = first_leaver(nvme_tier_);
      nvme_tier_.used_blocks -= gone->second.blocks;
      nvme_tier_.prefixes.erase(gone);
      ++out_.prefixes_dropped;
    }
    nvme_tier_.prefixes[moved_group] = moved;
    nvme_tier_.used_blocks += moved.blocks;
    const double bytes = moved.blocks * block_bytes_;
    out_.prefix_nvme_write_bytes += bytes;
    pending_tier_.host_to_nvme += bytes;
    out_.nvme_tier_peak_bytes = std::max(out_.nvme_tier_peak_bytes, nvme_tier_.used_blocks * block_bytes_);
  }
  return true;
}

void BatchScheduler::offload_prefix(int group, std::int64_t blocks, std::uint64_t uses, bool background) {
  if (blocks > host_tier_.capacity_blocks || !make_host_room(blocks)) {
    ++out_.prefixes_dropped;
    return;
  }
  host_tier_.prefixes[group] = StoredPrefix{blocks, ++clock_, uses};
  host_tier_.used_blocks += blocks;
  const double bytes = blocks * block_bytes_;
  out_.prefix_offload_bytes += bytes;
  (background ? pending_tier_.background_gpu_to_host : pending_tier_.gpu_to_host) += bytes;  // over PCIe
  out_.host_tier_peak_bytes = std::max(out_.host_tier_peak_bytes, host_tier_.used_blocks * block_bytes_);
}

std::optional<BatchScheduler::StoredPrefix> BatchScheduler::fetch_prefix(int group) {
  for (Tier* tier : {&host_tier_, &nvme_tier_}) {
    auto p = tier->prefixes.find(group);
    if (p == tier->prefixes.end()) continue;
    const StoredPrefix found = p->second;
    tier->used_blocks -= found.blocks;
    tier->prefixes.erase(p);
    const double bytes = found.blocks * block_bytes_;
    pending_tier_.host_to_gpu += bytes;
    if (tier == &nvme_tier_) {
      out_.prefix_fetch_nvme_bytes += bytes;
      pending_tier_.nvme_to_host += bytes;  // read first, then over PCIe
    } else {
      out_.prefix_fetch_host_bytes += bytes;
    }
    return found;
  }
  return std::nullopt;
}

}  // namespace memtwin
