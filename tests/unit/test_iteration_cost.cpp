// The serving iteration model's terms that depend on the engine and on compression: an eager
// engine's host dispatch, W4A16 weight dequantisation, SnapKV-style selection after prefill and
// H2O's score upkeep - each against its closed form, and the simulator using them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "models/scenario_loader.h"
#include "models/serving/iteration_cost.h"
#include "tests/unit/serving_helpers.h"

using namespace memtwin;
using test::kFp16;
using test::serve;
using test::source_path;

namespace {

Scenario scenario(const std::vector<std::string>& sets) { return load_scenario_file(source_path(kFp16), sets).scenario; }

// Llama-3-8B's attention: 32 layers, 32 query heads, 8 KV heads of 128 (models.yaml).
constexpr double kLayers = 32, kHeads = 32, kKvHeads = 8, kHeadDim = 128;
constexpr double kH100Bandwidth = 3.35e12, kMemoryEfficiency = 0.89, kAttentionEfficiency = 0.6, kBf16 = 989e12;

}  // namespace

TEST_CASE("an eager engine makes every layer wait for the host, CUDA graphs hide it", "[unit]") {
  const Scenario graphs = scenario({});
  const Scenario eager = scenario({"inference.serving.cuda_graphs=false", "cluster.runtime.eager_layer_overhead=100us"});
  const IterationModel with(graphs), without(eager);
  CHECK(without.decode_alone(1000) - with.decode_alone(1000) == Approx(kLayers * 100e-6).epsilon(1e-9));
  CHECK(without.prefill_alone(1000) - with.prefill_alone(1000) == Approx(kLayers * 100e-6).epsilon(1e-9));
}

TEST_CASE("W4A16 decode is ALU-bound where the GPU has few fp32 units for its bandwidth", "[unit]") {
  // Batch-1 decode of Llama-2-7B in AWQ int4: doubling the A100's fp32 rate shortens it (the
  // dequantisation is the bound, by a few percent over the weights' bytes); on an RTX 4090 (4x the fp32 rate for half the bandwidth) it
  // changes nothing (the weights' bytes are).
  for (const auto& [gpu, alu_bound] : {std::pair{"a100-80gb", true}, {"rtx-4090", false}}) {
    Scenario s = scenario({"model=llama-2-7b", "inference.serving.max_model_len=4096", std::string("cluster.gpu=") + gpu, "inference.weights.dtype=awq_int4"});
    const double base = IterationModel(s).decode_alone(16);
    s.cluster.gpu.flops[Precision::fp32] = FlopsPerSec(2 * s.cluster.gpu.flops.at(Precision::fp32).value());
    const double faster_alus = IterationModel(s).decode_alone(16);
    INFO(gpu << ": " << base * 1e3 << " ms, " << faster_alus * 1e3 << " ms with twice the fp32 rate");
    if (alu_bound) CHECK(faster_alus < 0.99 * base);
    else CHECK(faster_alus == Approx(base).epsilon(1e-12));
    // The fp16 weights never dequantise.
    Scenario fp16 = scenario({"model=llama-2-7b", "inference.serving.max_model_len=4096", std::string("cluster.gpu=") + gpu});
    const double fp16_base = IterationModel(fp16).decode_alone(16);
    fp16.cluster.gpu.flops[Precision::fp32] = FlopsPerSec(2 * fp16.cluster.gpu.flops.at(Precision::fp32).value());
    CHECK(IterationModel(fp16).decode_alone(16) == Approx(fp16_base).epsilon(1e-12));
  }
}

TEST_CASE("SnapKV's selection after prefill: the window scored against the prompt, the kept KV compacted", "[unit]") {
  const int prompt = 6000, budget = 1024, window = 32;
  const Scenario snap = scenario({"inference.kv_cache.compression={method: snapkv, budget: 1024}"});
  const double extra = IterationModel(snap).prefill_alone(prompt) - IterationModel(scenario({})).prefill_alone(prompt);
  const double flops = 2 * kLayers * kHeads * kHeadDim * window * prompt;
  const double token_bytes = 2 * kLayers * kKvHeads * kHeadDim * 2;  // K and V, fp16
  const double bytes = prompt * token_bytes / 2 + 2 * budget * token_bytes;
  const double expected = std::max(flops / (kBf16 * kAttentionEfficiency), bytes / (kH100Bandwidth * kMemoryEfficiency));
  CHECK(extra == Approx(expected).epsilon(1e-6));
  // The simulator charges it: an idle system's TTFT is prefill_alone, selection included.
  const std::vector<std::string> sets = {"inference.kv_cache.compression={method: snapkv, budget: 1024}",
                                         "inference.workload.rate=0.05/s", "inference.workload.requests=3",
                                         "inference.workload.prompt_tokens=6000", "inference.workload.output_tokens=8"};
  const auto doc = serve(kFp16, sets);
  CHECK(doc["latency_s"]["ttft"]["p50"].get<double>() == Approx(IterationModel(snap).prefill_alone(prompt)).epsilon(1e-6));
}

TEST_CASE("H2O pays for its scores: probabilities written and accumulated every decode step, the prompt scored once", "[unit]") {
  const Scenario h2o = scenario({"inference.kv_cache.compression={method: h2o}"});
  const IterationModel model(h2o);
  // A decode step over 2,000 prompt tokens keeps 400 (10% heavy + 10% recent): the cache bytes
  // (K, V and the fp32 score per KV head) plus the upkeep (probabilities per query head written
  // and read, scores read-modified-written and scanned).
  const double kept = 400;
  IterationLoad load;
  load.decode_sequences = 1;
  load.decode_context = kept;
  const double cache = kept * (2 * kLayers * kKvHeads * kHeadDim * 2 + 4 * kLayers * kKvHeads);
  load.kv_bytes_read = cache;
  const double without_kv = model.compute_seconds(IterationLoad{0, 0, 1, 0, 0, 0});
  const double upkeep = kept * 4 * kLayers * (2 * kHeads + 3 * kKvHeads);
  CHECK(model.compute_seconds(load) - without_kv ==
        Approx((cache + upkeep) / (kH100Bandwidth * kMemoryEfficiency)).epsilon(1e-6));
  CHECK(model.decode_alone(2000) == Approx(model.compute_seconds(load)).epsilon(1e-9));
  // Prefill computes QK^T once more for the heavy hitters: 1.5x the attention FLOPs.
  const IterationModel plain(scenario({}));
  IterationLoad prefill{8000, 8000 * 4000.0, 0, 1};
  const double attention = 4 * kLayers * kHeads * kHeadDim * prefill.prefill_attention / (kBf16 * kAttentionEfficiency);
  CHECK(model.compute_seconds(prefill) - plain.compute_seconds(prefill) == Approx(0.5 * attention).epsilon(1e-6));
}

TEST_CASE("a calibrated decode-attention table is read at the model's head_dim, and eviction methods read their vectors' format", "[unit]") {
  // Two tables of one rate each: fp16 at head_dim 128 and fp16 at 64; decode attention then
  // takes elements / rate, whatever the working set.
  const auto dir = std::filesystem::temp_directory_path() / "memtwin-hd-calibration";
  std::filesystem::create_directories(dir);
  const auto file = (dir / "cal.yaml").string();
  std::ofstream(file) << "kernels:\n  decode_attention:\n    fp16: {1MiB: 1e9}\n    fp16_hd64: {1MiB: 5e8}\n";
  const std::string calibrated = "cluster.calibration=" + file;
  const std::string hd64 = "model={layers: 32, hidden: 2048, heads: 32, kv_heads: 8, intermediate: 8192, vocab: 32000, mlp: swiglu}";
  const std::string hd128 = "model={layers: 32, hidden: 4096, heads: 32, kv_heads: 8, intermediate: 8192, vocab: 32000, mlp: swiglu}";
  auto attention_seconds = [&](const std::vector<std::string>& sets) {
    // The decode step's time with 4096 cached tokens less with 1: attention's part, the rest equal.
    const IterationModel m(scenario(sets));
    return m.decode_alone(4096) - m.decode_alone(1);
  };
  const double elements = 2.0 * 32 * 8 * 4095;  // K and V, layers x KV heads, per head_dim channel below
  CHECK(attention_seconds({calibrated, hd128}) == Approx(elements * 128 / 1e9).epsilon(0.02));
  CHECK(attention_seconds({calibrated, hd64}) == Approx(elements * 64 / 5e8).epsilon(0.02));
  // H2O keeps fp16 vectors: the fp16 kernel's rate, not the roofline (its score upkeep aside).
  const double h2o = attention_seconds({calibrated, hd128, "inference.kv_cache.compression={method: h2o, heavy_ratio: 0.5, recent_ratio: 0.5}"});
  const double h2o_roofline = attention_seconds({hd128, "inference.kv_cache.compression={method: h2o, heavy_ratio: 0.5, recent_ratio: 0.5}"});
  CHECK(h2o > 5 * h2o_roofline);  // 1e9 elements/s is far below an H100's roofline
  std::filesystem::remove_all(dir);
}

TEST_CASE("a decode iteration's weight GEMMs take the time measured whole at its row count", "[unit]") {
  // t(f) = rest + W / (hbm x f): halving the measured fraction at one row adds W / hbm, then twice that.
  auto decode_one = [](double fraction) {
    const std::string path = "/tmp/memtwin-test-gemm-rows-" + std::to_string(fraction) + ".yaml";
    std::ofstream(path) << "efficiency:\n  gemm_memory_by_rows: {1: " << fraction << ", 8: 0.3, 64: 0.2}\n";
    return IterationModel(load_scenario_file(source_path("scenarios/host/serve-fp16-kv.yaml"),
                                             {"cluster.calibration=" + path})
                              .scenario)
        .decode_alone(200);
  };
  const double t1 = decode_one(0.5), t2 = decode_one(0.25), t3 = decode_one(0.125);
  CHECK(t2 > t1);
  CHECK(t3 - t2 == Approx(2 * (t2 - t1)).epsilon(1e-9));
}

TEST_CASE("a decode iteration's weight GEMMs each take the rate measured at the shape nearest theirs", "[unit]") {
  // The host model (hidden 512, intermediate 1408, vocabulary 8192): its QKV (512x1536), attention
  // output (512x512), gate-up (512x2816) and down (1408x512) matrices are nearer the measured
  // 512x1536 than 512x8192, the head is 512x8192. Changing the narrow shape's one-row fraction
  // moves a one-sequence decode step by the four block matrices' bytes alone, at one row only.
  auto decode = [](double narrow, int sequences) {
    const std::string path = "/tmp/memtwin-test-gemm-shape-" + std::to_string(narrow) + ".yaml";
    std::ofstream(path) << "efficiency:\n  gemm_memory_by_shape:\n    512x1536: {1: " << narrow
                        << ", 2: 0.3, 64: 0.2}\n    512x8192: {1: 0.4, 2: 0.4, 64: 0.2}\n";
    const Scenario s = load_scenario_file(source_path("scenarios/host/serve-fp16-kv.yaml"), {"cluster.calibration=" + path}).scenario;
    IterationLoad load;
    load.decode_sequences = sequences;
    load.decode_context = 200.0 * sequences;
    load.kv_bytes_read = load.decode_context * 2 * 4 * 8 * 64 * 2;
    return std::pair{IterationModel(s).compute_seconds(load), s.cluster.gpu.hbm_bandwidth.value()};
  };
  const double block_bytes = 4.0 /* layers */ * (512 * 1536 + 512 * 512 + 512 * 2816 + 1408 * 512) * 4 /* fp32 */;
  const auto [fast, hbm] = decode(0.8, 1);
  const auto [slow, same_hbm] = decode(0.4, 1);
  CHECK(same_hbm == hbm);
  CHECK(slow - fast == Approx(block_bytes / hbm * (1 / 0.4 - 1 / 0.8)).epsilon(1e-9));
  // Two sequences read the tables' two-row points, which did not change.
  CHECK(decode(0.8, 2).first == Approx(decode(0.4, 2).first).epsilon(1e-12));
  // Past the tables' last row count the GEMMs are not measured: the roofline prices them.
  const double beyond = decode(0.8, 100).first;
  CHECK(beyond == Approx(decode(0.4, 100).first).epsilon(1e-12));
}

TEST_CASE("an iteration's time is the sum of its kinds of work, each where its method does it", "[unit]") {
  IterationLoad load;
  load.prefill_tokens = 512;
  load.prefills_completing = 1;
  load.prefill_attention = 512 * 256.0;
  load.completed_prompt_tokens = 512;
  load.completed_prompt_kept_bytes = 512 * 1024.0;
  load.decode_sequences = 8;
  load.decode_context = 8 * 1000.0;
  load.kv_bytes_read = load.decode_context * 2 * kLayers * kKvHeads * kHeadDim * 2;
  auto breakdown = [&](const std::string& compression) {
    const IterationModel m(scenario({"inference.kv_cache.compression=" + compression}));
    const IterationOpSeconds ops = m.compute_breakdown(load);
    CHECK(ops.total() == Approx(m.compute_seconds(load)).epsilon(1e-12));
    return ops;
  };
  const auto full = breakdown("{method: none}");
  CHECK(full[IterationOp::weight_gemm] > 0);
  CHECK(full[IterationOp::decode_attention] > 0);
  CHECK(full[IterationOp::prefill_attention] > 0);
  CHECK(full[IterationOp::elementwise] > 0);
  CHECK(full[IterationOp::kv_selection] == 0);
  CHECK(full[IterationOp::score_upkeep] == 0);
  const auto snapkv = breakdown("{method: snapkv, budget: 256, window: 32}");
  CHECK(snapkv[IterationOp::kv_selection] > 0);
  CHECK(snapkv[IterationOp::score_upkeep] == 0);
  // H2O scores its prompts (half of their attention's FLOPs again) and keeps scores each step.
  const auto h2o = breakdown("{method: h2o, heavy_ratio: 0.2, recent_ratio: 0.1}");
  CHECK(h2o[IterationOp::kv_selection] == Approx(0.5 * h2o[IterationOp::prefill_attention]).epsilon(1e-9));
  CHECK(h2o[IterationOp::score_upkeep] > 0);
  // A measured scoring kernel (memtwin calibrate's kernels.prompt_scoring) prices the prompt's
  // causal pairs, every layer's query heads.
  const std::string h2o_method = "inference.kv_cache.compression={method: h2o, heavy_ratio: 0.2, recent_ratio: 0.1}";
  const IterationModel measured(scenario({h2o_method, "cluster.kernels.prompt_scoring=1e8"}));
  CHECK(measured.compute_breakdown(load)[IterationOp::kv_selection] ==
        Approx(kLayers * kHeads * load.prefill_attention / 1e8).epsilon(1e-12));
  // The same rate from a calibration file.
  const auto file = (std::filesystem::temp_directory_path() / "memtwin-prompt-scoring.yaml").string();
  std::ofstream(file) << "kernels:\n  prompt_scoring: 1e8\n";
  const IterationModel from_file(scenario({h2o_method, "cluster.calibration=" + file}));
  CHECK(from_file.compute_breakdown(load)[IterationOp::kv_selection] ==
        Approx(measured.compute_breakdown(load)[IterationOp::kv_selection]).epsilon(1e-12));
}

TEST_CASE("a MoE iteration reads only the experts its tokens are routed to, every expert once enough tokens are", "[unit]") {
  const Scenario s = scenario({"model=mixtral-8x7b", "cluster.gpu=h200", "inference.serving.max_model_len=4096"});
  const IterationModel model(s);
  const ModelSpec& m = s.model;
  const double experts = 2.0 * m.layers * m.experts * 3.0 * m.hidden * m.intermediate;  // bf16
  const double all = model.weight_bytes_read(1e6);
  // One token goes to 2 of 8 experts: three quarters of the experts' bytes are not read.
  CHECK(all - model.weight_bytes_read(1) == Approx(0.75 * experts).epsilon(1e-9));
  CHECK(model.experts_touched(2) == Approx(0.5));
  CHECK(model.weight_bytes_read(4) == Approx(all));
  // So a lone decode step costs less than a batch of four, which reads every expert.
  IterationLoad one, four;
  one.decode_sequences = 1;
  four.decode_sequences = 4;
  CHECK(model.compute_breakdown(one)[IterationOp::weight_gemm] < 0.5 * model.compute_breakdown(four)[IterationOp::weight_gemm]);
  // A dense model reads all of its weights at any batch.
  const IterationModel dense(scenario({}));
  CHECK(dense.experts_touched(1) == 1.0);
}
