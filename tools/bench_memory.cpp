// Benchmark (not a test): how fast the analytic memory model answers scenario variants.
// Loads the example scenarios once, then evaluates N variants (micro-batch, sequence length,
// sharding, recompute, offload, cluster size; for serving: context, KV method, TP) and prints the
// wall time. Target (issue 3): 10,000 variants in under a second.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "models/memory/serving_memory.h"
#include "models/memory/training_memory.h"
#include "models/scenario_loader.h"

using namespace memtwin;

int main(int argc, char** argv) {
  const std::string root = argc > 1 ? argv[1] : ".";
  const long variants = argc > 2 ? std::stol(argv[2]) : 10000;
  const Scenario train = load_scenario_file(root + "/scenarios/training/llama2-70b-fsdp-64xh100.yaml").scenario;
  const Scenario serve = load_scenario_file(root + "/scenarios/serving/llama3-8b-h100-fp16-kv.yaml").scenario;

  long fits = 0;
  double checksum = 0;
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < variants; ++i) {
    if (i % 2 == 0) {
      Scenario s = train;
      Training& t = *s.training;
      t.micro_batch = 1 << (i / 2 % 4);
      t.seq_len = 1024 << (i / 8 % 4);
      t.recompute = static_cast<Recompute>(i / 32 % 3);
      t.sharding.fsdp_mode = static_cast<FsdpMode>(i / 96 % 3);  // full, shard_grad_op, hybrid
      t.sharding.shard_group = 8;
      s.cluster.nodes = 8 << (i / 288 % 3);
      const int dp = s.cluster.total_gpus();
      t.global_batch = t.micro_batch * dp;
      TrainingMemory m = training_memory(s);
      fits += m.fits();
      checksum += m.peak.as_double();
    } else {
      Scenario s = serve;
      Inference& inf = *s.inference;
      inf.serving.max_model_len = 1024 << (i / 2 % 4);
      inf.kv_cache.compression.method = static_cast<KvCompression>(i / 8 % kKvCompressionNames.names.size());
      inf.kv_cache.compression.window = 32;
      ServingMemory m = serving_memory(s);
      fits += m.fits;
      checksum += m.kv_pool.as_double();
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("analytic memory model: %ld variants in %.3f s (%.1f us each, %.0f per second); %ld fit; checksum %.6e\n",
              variants, seconds, 1e6 * seconds / variants, variants / seconds, fits, checksum);

  // End to end, as `memtwin fit` and sweeps do it: parse, validate and evaluate each variant.
  const long loads = std::min<long>(variants, 2000);
  const auto load_start = std::chrono::steady_clock::now();
  for (long i = 0; i < loads; ++i) {
    LoadedScenario l = load_scenario_file(root + "/scenarios/training/llama2-70b-fsdp-64xh100.yaml",
                                          {"training.micro_batch=" + std::to_string(1 + i % 4),
                                           "training.global_batch=" + std::to_string(64 * (1 + i % 4) * 16)});
    checksum += training_memory(l.scenario).peak.as_double();
  }
  const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  std::printf("with YAML loading and validation: %ld variants in %.3f s (%.0f us each)\n", loads, load_seconds,
              1e6 * load_seconds / loads);
  return 0;
}
