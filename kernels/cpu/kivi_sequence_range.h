#pragma once
// Internal to kernels/cpu: where a KIVI sequence's groups and residual tokens lie in the paged pool
// (the layout kivi_paged.h describes), for the portable kernels and the AVX2 and AVX-512 decode
// attentions.
#include <cstddef>
#include <cstdint>

#include "kernels/kivi_paged.h"

namespace memtwin::kernels {

/// The sequence's byte range of one layer, addressed through its block table.
struct KiviSequenceRange {
  const KiviPagedShape& shape;
  const std::int32_t* table;
  std::uint8_t* cache;
  // (the shape's sizes, asked once: they are computed from its format)
  std::size_t slice = shape.slice_bytes(), group_bytes = shape.group_bytes(), head_bytes = shape.head_group_bytes();
  [[nodiscard]] std::uint8_t* at(std::size_t offset) const {
    return cache + static_cast<std::size_t>(table[offset / slice]) * slice + offset % slice;
  }
  [[nodiscard]] std::uint8_t* group(std::int64_t g) const { return at(static_cast<std::size_t>(g) * group_bytes); }
  /// KV head kvh's part of group g: its keys, then its values.
  [[nodiscard]] std::uint8_t* head_part(std::int64_t g, int kvh) const {
    return group(g) + static_cast<std::size_t>(kvh) * head_bytes;
  }
  /// Residual token j of a sequence whose first `quantized` tokens are groups.
  [[nodiscard]] std::uint8_t* residual(std::int64_t quantized, std::int64_t j) const {
    return at(static_cast<std::size_t>(quantized / shape.group) * group_bytes +
              static_cast<std::size_t>(j) * shape.residual_token_bytes());
  }
};

}  // namespace memtwin::kernels
