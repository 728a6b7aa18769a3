#include "hw/kv/channel_key_group_cache.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "models/backend.h"
#include "models/model_facts.h"

namespace memtwin::hw {

kernels::KiviPagedShape channel_key_group_shape(const Scenario& s, std::int64_t capacity_blocks) {
  const Inference& inf = *s.inference;
  const CompressionSpec& c = inf.kv_cache.compression;
  if (kv_method(c.method).storage != KvStorage::channel_key_groups) {
    throw std::logic_error("channel_key_group_shape: the scenario's KV method does not group keys per channel");
  }
  if (inf.kv_cache.dtype != KvDtype::fp16) {
    throw Unsupported("the serving engine keeps KIVI's residual in fp16: set inference.kv_cache.dtype: fp16");
  }
  kernels::KiviPagedShape shape;
  shape.num_blocks = static_cast<int>(capacity_blocks);
  shape.block_size = inf.serving.block_size;
  shape.kv_heads = kv_heads_per_rank(s.model, inf.serving.tensor_parallel);
  shape.head_dim = s.model.head_dim;
  shape.bits = c.bits;
  shape.group = c.group_size;
  shape.residual = c.residual;
  try {
    shape.validate();
  } catch (const std::invalid_argument& e) {
    throw Unsupported(std::string("the serving engine cannot lay this KIVI cache out (inference.serving.block_size, "
                                  "inference.kv_cache.compression): ") +
                      e.what());
  }
  return shape;
}

ChannelKeyGroupCache::ChannelKeyGroupCache(const Scenario& s, std::int64_t capacity_blocks, double block_bytes,
                                           ServingKernels& kernels, CachingAllocator& allocator)
    : shape_(channel_key_group_shape(s, capacity_blocks)), layers_(s.model.layers), kernels_(kernels), allocator_(allocator) {
  if (!kernels_.supports_kivi()) throw Unsupported("this device has no KIVI kernels");
  // The scheduler's block is every layer's slice of it, so the pool is the memory model's.
  if (static_cast<double>(shape_.slice_bytes()) * layers_ != block_bytes) {
    throw std::logic_error("KIVI's block (" + std::to_string(shape_.slice_bytes() * static_cast<std::size_t>(layers_)) +
                           " bytes) differs from the memory model's (" + std::to_string(block_bytes) + ")");
  }
  pool_bytes_ = static_cast<std::int64_t>(shape_.bytes()) * layers_;
  pool_ = static_cast<std::uint8_t*>(allocator_.allocate(pool_bytes_, "kv_cache"));
}

ChannelKeyGroupCache::~ChannelKeyGroupCache() {
  end();
  allocator_.release(pool_);
}

std::vector<ChannelKeyGroupCache::Entry> ChannelKeyGroupCache::entries(const ScheduledIteration& it) {
  std::vector<Entry> out;
  for (const Sequence* q : it.decoding) out.push_back({q, q->prompt + q->generated - 1, 1});
  for (std::size_t i = 0; i < it.prefilling.size(); ++i) out.push_back({it.prefilling[i], it.prefilling[i]->prefilled, it.chunks[i]});
  return out;
}

void ChannelKeyGroupCache::stage(const ScheduledIteration& it, const BlockPool& blocks) {
  end();
  const std::vector<Entry> all = entries(it);
  std::vector<std::int64_t> offset(all.size(), -1);  // halves into the staging of one layer
  std::int64_t per_layer = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const std::int64_t before = all[i].cached, after = before + all[i].added;
    const std::int64_t residual = before - shape_.quantized_tokens(before);
    if (shape_.quantized_tokens(after) == shape_.quantized_tokens(before) || residual == 0) continue;
    offset[i] = per_layer;
    per_layer += residual * static_cast<std::int64_t>(shape_.residual_token_bytes()) / 2;
  }
  staged_.assign(static_cast<std::size_t>(layers_), std::vector<const std::uint16_t*>(all.size(), nullptr));
  if (per_layer == 0) return;
  staging_ = static_cast<std::uint16_t*>(allocator_.allocate(2 * per_layer * layers_, "kv_cache.kivi_staging"));
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (offset[i] < 0) continue;
    const std::vector<std::int32_t> table = blocks.table(*all[i].sequence);
    const bool held = static_cast<double>(table.size()) * static_cast<double>(shape_.slice_bytes()) >=
                      static_cast<double>(shape_.sequence_bytes(all[i].cached));
    for (int l = 0; l < layers_; ++l) {
      std::uint16_t* out = staging_ + per_layer * l + offset[i];
      if (held) kernels_.kivi_stage_residual(layer_region(l), table.data(), all[i].cached, shape_, out);
      else kernels_.fill(reinterpret_cast<float*>(out), (all[i].cached - shape_.quantized_tokens(all[i].cached)) *
                                                           static_cast<std::int64_t>(shape_.residual_token_bytes()) / 4,
                         0.0f);  // swapped in: its blocks came back without their contents (timing only)
      staged_[static_cast<std::size_t>(l)][i] = out;
    }
  }
}

void ChannelKeyGroupCache::lay_out(const ScheduledIteration& it, const BlockPool& blocks) {
  const std::vector<Entry> all = entries(it);
  std::vector<std::vector<std::int32_t>> tables;
  max_blocks_ = 1;
  for (const Entry& e : all) {
    tables.push_back(blocks.table(*e.sequence));
    if (static_cast<double>(tables.back().size()) * static_cast<double>(shape_.slice_bytes()) <
        static_cast<double>(shape_.sequence_bytes(e.cached + e.added))) {
      throw std::logic_error("KIVI: a sequence's " + std::to_string(tables.back().size()) + " blocks do not hold its " +
                             std::to_string(e.cached + e.added) + " tokens (" + std::to_string(shape_.sequence_bytes(e.cached + e.added)) +
                             " bytes a layer): the scheduler and the pool disagree");
    }
    max_blocks_ = std::max(max_blocks_, static_cast<int>(tables.back().size()));
  }
  tables_.assign(all.size() * static_cast<std::size_t>(max_blocks_), 0);
  first_row_.clear(), added_.clear(), cached_.clear(), context_.clear();
  std::int32_t row = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    std::copy(tables[i].begin(), tables[i].end(), tables_.begin() + static_cast<long>(i) * max_blocks_);
    first_row_.push_back(row);
    added_.push_back(all[i].added);
    cached_.push_back(all[i].cached);
    row += all[i].added;
  }
  decodes_ = static_cast<int>(it.decoding.size());
  for (int i = 0; i < decodes_; ++i) context_.push_back(cached_[static_cast<std::size_t>(i)] + 1);
  if (staged_.size() != static_cast<std::size_t>(layers_) || staged_.front().size() != all.size()) {
    staged_.assign(static_cast<std::size_t>(layers_), std::vector<const std::uint16_t*>(all.size(), nullptr));
  }
}

void ChannelKeyGroupCache::append(int layer, const float* k_new, const float* v_new) {
  if (cached_.empty()) return;
  auto a = kernels::make_kivi_append_args(k_new, v_new, static_cast<int>(cached_.size()), first_row_.data(), added_.data(),
                                          cached_.data(), tables_.data(), max_blocks_, shape_, layer_region(layer));
  a.staged = staged_[static_cast<std::size_t>(layer)].data();
  kernels_.kivi_append(a);
}

void ChannelKeyGroupCache::decode_attention(int layer, const float* query, int q_heads, float* out) {
  if (decodes_ == 0) return;
  // The decodes' rows of the tables come first.
  kernels_.kivi_decode_attention(kernels::make_kivi_decode_args(query, layer_region(layer), tables_.data(), context_.data(), out,
                                                                decodes_, q_heads, max_blocks_, shape_));
}

void ChannelKeyGroupCache::end() {
  if (staging_) allocator_.release(staging_);
  staging_ = nullptr;
  staged_.clear();
}

}  // namespace memtwin::hw
