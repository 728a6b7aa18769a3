#pragma once
// KV tensors a user gives `memtwin kernels`: NumPy .npy arrays, or one tensor of a safetensors file
// (`FILE.safetensors` when it holds one tensor, `FILE.safetensors:NAME` to pick one), of shape
// [tokens, kv_heads, head_dim] in F32, F16 or BF16. Errors throw std::runtime_error naming the file.
#include <string>

#include "kernels/kv_quality.h"

namespace memtwin::cli {

kernels::KvTensor read_kv_file(const std::string& spec);

}  // namespace memtwin::cli
