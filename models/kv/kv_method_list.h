#pragma once
// The descriptors, one function per method file (internal to models/kv; kv_registry.cpp lists them).
#include "models/kv/kv_method.h"

namespace memtwin::kv_methods_detail {

const KvMethod& none_method();
const KvMethod& kivi_method();
const KvMethod& int8_method();
const KvMethod& int4_method();
const KvMethod& int2_method();
const KvMethod& h2o_method();
const KvMethod& streaming_method();
const KvMethod& snapkv_method();
const KvMethod& pyramidkv_method();
const KvMethod& entropy_method();

/// The quantisation group of the integer methods and KIVI.
KvParameter group_size_parameter();
/// The prompt-voting methods' observation window, budget and score pooling (SnapKV family).
KvParameter observation_window_parameter();
KvParameter budget_parameter();
KvParameter pooling_kernel_parameter();
/// Reads the SnapKV family's window, budget and pooling, and checks the budget exceeds the window.
void read_prompt_vote(const KvParameterReader& r, CompressionSpec& c);

/// What `memtwin quality` keeps of a prompt at a budget (a share of its tokens): at least `least`
/// tokens; the budget's label ("20% of the prompt"); the SnapKV family's variant (its window at
/// most half the budget).
int budget_tokens(int prompt, double budget, int least);
std::string budget_label(double budget);
std::vector<KvQualityVariant> prompt_vote_variants(int prompt, double budget);

}  // namespace memtwin::kv_methods_detail
