#include "tools/bench_workloads.h"

#include <cstring>
#include <random>

namespace memtwin::bench {

Workload make_workload(KvElement e, int context, int batch) {
  Workload w;
  w.shape.format.element = e;
  w.shape.format.head_dim = kHeadDim;
  w.shape.kv_heads = kKvHeads;
  w.shape.block_size = kBlock;
  w.max_blocks = (context + kBlock - 1) / kBlock;
  w.shape.num_blocks = w.max_blocks * batch;
  w.k = HostBuffer(w.shape.bytes());
  w.v = HostBuffer(w.shape.bytes());
  // Random vectors, quantised once and tiled (filling gigabytes through the quantiser is slow).
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(static_cast<std::size_t>(kBlock) * kKvHeads * kHeadDim);
  for (auto& f : x) f = normal(rng);
  std::vector<std::int64_t> slots(kBlock);
  for (int i = 0; i < kBlock; ++i) slots[i] = i;
  std::vector<std::uint8_t> block(w.shape.block_stride());
  PagedShape one = w.shape;
  one.num_blocks = 1;
  write_paged(x.data(), slots.data(), kBlock, one, block.data());
  for (int b = 0; b < w.shape.num_blocks; ++b) {
    std::memcpy(w.k.data() + b * w.shape.block_stride(), block.data(), block.size());
    std::memcpy(w.v.data() + b * w.shape.block_stride(), block.data(), block.size());
  }
  w.table.resize(static_cast<std::size_t>(batch) * w.max_blocks);
  for (std::size_t i = 0; i < w.table.size(); ++i) w.table[i] = static_cast<std::int32_t>(i);
  w.context_lens.assign(batch, context);
  w.query.resize(static_cast<std::size_t>(batch) * kQHeads * kHeadDim);
  for (auto& f : w.query) f = normal(rng);
  w.out.resize(w.query.size());
  return w;
}

std::unique_ptr<KiviWorkload> make_kivi_workload(int bits, int context) {
  auto w = std::make_unique<KiviWorkload>();
  KiviPagedShape& shape = w->shape;
  shape.kv_heads = kKvHeads;
  shape.head_dim = kHeadDim;
  shape.bits = bits;
  shape.group = 32;
  shape.residual = 128;
  shape.block_size = 32;
  // Blocks are counted in bytes (the fp16 residual takes more per token than quantised groups).
  const int max_blocks = static_cast<int>((shape.sequence_bytes(context) + shape.slice_bytes() - 1) / shape.slice_bytes());
  shape.num_blocks = max_blocks;
  w->cache = HostBuffer(shape.bytes());
  w->table.resize(max_blocks);
  for (int i = 0; i < max_blocks; ++i) w->table[i] = i;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> keys(static_cast<std::size_t>(context) * kKvHeads * kHeadDim), values(keys.size());
  for (auto& x : keys) x = normal(rng);
  for (auto& x : values) x = normal(rng);
  const std::int32_t first_row = 0, new_tokens = context, cached = 0;
  kivi_append(make_kivi_append_args(keys.data(), values.data(), 1, &first_row, &new_tokens, &cached, w->table.data(), max_blocks,
                                    shape, w->cache.data()));
  w->query.resize(static_cast<std::size_t>(kQHeads) * kHeadDim);
  w->out.resize(w->query.size());
  for (auto& x : w->query) x = normal(rng);
  w->context_len = context;
  w->args = make_kivi_decode_args(w->query.data(), w->cache.data(), w->table.data(), &w->context_len, w->out.data(), 1, kQHeads,
                                  max_blocks, shape);
  w->kv_bytes = static_cast<double>(shape.sequence_bytes(context));
  return w;
}

}  // namespace memtwin::bench
