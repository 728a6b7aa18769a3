// KIVI (Liu et al. 2024): keys quantised per channel in groups of tokens, values per token in groups
// of channels, and the most recent `residual` tokens (plus an incomplete group) kept in 16 bits.
#include <string>

#include "models/kv/kv_method_list.h"
#include "models/kv/kv_methods.h"

namespace memtwin::kv_methods_detail {

const KvMethod& kivi_method() {
  static const KvMethod method = [] {
    KvMethod m;
    m.id = KvCompression::kivi;
    // Bits' default is KIVI's own: the integer methods' bits follow from their names.
    const KvParameter bits{.key = "bits", .meaning = "2 or 4", .default_value = "2", .default_in_schema = false, .min = 1, .max = 8};
    const KvParameter residual{.key = "residual", .meaning = "recent tokens kept in full precision", .default_value = "128", .min = 0};
    m.parameters = {bits, group_size_parameter(), residual};
    m.storage = KvStorage::channel_key_groups;
    m.selection = KvSelection::all;
    // Its decode kernel over quantised groups (and its append, for kv_write) at each width, and the
    // same decode kernel over the 16-bit residual.
    m.kernel_formats = {{"kivi2", "kivi2 cache's quantised groups"},
                        {"kivi4", "kivi4 cache's quantised groups"},
                        {"kivi_fp16", "KIVI cache's fp16 residual", false}};
    // A residual of one group, so that the groups hold most of a short text's tokens.
    m.quality_variants = [](int, double) -> std::vector<KvQualityVariant> {
      return {{"4 bits, residual 32", {"compression.bits=4", "compression.group_size=32", "compression.residual=32"}},
              {"2 bits, residual 32", {"compression.bits=2", "compression.group_size=32", "compression.residual=32"}}};
    };
    m.read = [](const KvParameterReader& r, CompressionSpec& c) {
      c.bits = r.integer("bits");
      if (c.bits != 2 && c.bits != 4) r.fail("bits", "KIVI uses 2 or 4 bits");
      c.group_size = r.integer("group_size");
      c.residual = r.integer("residual");
      if (c.residual % c.group_size != 0) {
        r.fail("residual", "KIVI needs the residual window (" + std::to_string(c.residual) +
                               ") to be a multiple of group_size (" + std::to_string(c.group_size) + ")");
      }
    };
    m.make = [](const CompressionSpec& c, const KvShape& shape) -> std::unique_ptr<KvCompressor> {
      return std::make_unique<GroupQuantKv>(shape, c.bits, c.group_size, true, c.residual);
    };
    return m;
  }();
  return method;
}

}  // namespace memtwin::kv_methods_detail
