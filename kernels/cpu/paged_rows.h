#pragma once
// Internal to kernels/cpu: how the vectorised paged decode kernels (AVX2 and AVX-512) walk a
// sequence's cache, and what else both take from its format. Plain C++: included by translation units built for either instruction set.
#include <cstddef>
#include <cstdint>

#include "kernels/kv_format.h"

namespace memtwin::kernels::simd {

// Consecutive KV heads of one sequence, attended together: in the paged layout a token's vectors
// of all KV heads lie side by side, so a pass over the tokens for a range of heads reads memory in
// order (one head at a time strides through it, 2 KB between rows, which the hardware prefetchers
// follow poorly).
struct Heads {
  int first = 0, count = 1;
};

// The factor an e4m3 cache's partial results take at the end (1 for other formats): the kernels
// widen e4m3 as its value over 2^8 and multiply by 2^8 and the cache's scale once.
inline float element_factor(const KvFormat& f) { return f.element == KvElement::fp8 ? 256.f * f.fp8_scale : 1.f; }

// The cache's geometry, derived once per call: KvFormat and PagedShape compute each figure through
// switches and divisions, which cost more than a token's arithmetic when repeated for every token.
struct Layout {
  std::size_t vector_bytes, token_stride, block_stride;
  int block_size, group, groups, group_bytes, code_bytes;
  explicit Layout(const PagedShape& s)
      : vector_bytes(s.format.vector_bytes()),
        token_stride(s.token_stride()),
        block_stride(s.block_stride()),
        block_size(s.block_size),
        group(s.format.group),
        groups(s.format.quantized() ? s.format.groups() : 1),
        group_bytes(s.format.group_bytes()),
        code_bytes(s.format.code_bytes_per_group()) {}
};

// A sequence's rows in token order (each row: a token's vectors of a range of KV heads, side by
// side), its block and slot advanced together instead of divided out for every token.
class Rows {
 public:
  Rows(const std::uint8_t* cache, const std::int32_t* table, const Layout& layout, int first_head, int ctx, int start)
      : cache_(cache + static_cast<std::size_t>(first_head) * layout.vector_bytes),
        table_(table),
        layout_(layout),
        ctx_(ctx),
        t_(start),
        block_(start / layout.block_size),
        slot_(start % layout.block_size) {
    if (valid()) row_ = block_start() + static_cast<std::size_t>(slot_) * layout_.token_stride;
  }
  [[nodiscard]] bool valid() const { return t_ < ctx_; }
  [[nodiscard]] const std::uint8_t* row() const { return row_; }
  void next() {
    ++t_;
    if (++slot_ == layout_.block_size) {
      slot_ = 0;
      ++block_;
      if (valid()) row_ = block_start();  // the block table is read only for tokens the sequence has
    } else if (valid()) {
      row_ += layout_.token_stride;  // (past the end the row is not moved: it may be null)
    }
  }

 private:
  [[nodiscard]] const std::uint8_t* block_start() const {
    return cache_ + static_cast<std::size_t>(table_[block_]) * layout_.block_stride;
  }
  const std::uint8_t* cache_;
  const std::int32_t* table_;
  const Layout& layout_;
  int ctx_, t_, block_, slot_;
  const std::uint8_t* row_ = nullptr;
};

}  // namespace memtwin::kernels::simd
