// The continuous-batching scheduler on its own, driven by a plain clock (no SimGrid): the books it
// keeps must balance under preemption, prefix sharing and tiering, whatever the load.
#include <catch2/catch.hpp>

#include "models/memory/serving_memory.h"
#include "models/scenario_loader.h"
#include "models/serving/batch_scheduler.h"
#include "models/serving/iteration_cost.h"
#include "models/serving/request_stream.h"
#include "tests/test_support.h"

using namespace memtwin;

namespace {

// Runs every request through one replica, checking the KV books after each iteration; returns the run.
ServingRun drive(const Scenario& s, std::int64_t capacity_blocks) {
  const ServingMemory memory = serving_memory(s);
  ServingRun run = start_serving_run(generate_requests(*s.inference, s.seed));
  run.capacity_blocks = capacity_blocks;
  const auto kv = make_kv_compressor(s.inference->kv_cache.compression, serving_kv_shape(s));
  BatchScheduler scheduler(0, s, *kv, run, capacity_blocks, memory.block_bytes.as_double());
  const IterationModel model(s);
  std::size_t next = 0, finished = 0;
  scheduler.on_finish = [&](std::size_t) { ++finished; };
  double now = 0;
  long iterations = 0;
  while (finished < run.requests.size()) {
    while (next < run.requests.size() && run.requests[next].arrival_s <= now) {
      scheduler.enqueue(next, run.requests[next].prompt_tokens);
      ++next;
    }
    auto it = scheduler.schedule();
    if (!it) {
      REQUIRE(next < run.requests.size());  // nothing runnable only while requests are still to come
      now = run.requests[next].arrival_s;
      continue;
    }
    const double started = now;
    now += model.seconds(it->load) + it->tier.serial_seconds(s.cluster) + 1e-6;
    scheduler.complete(*it, started, now);
    REQUIRE(scheduler.used_blocks() >= 0);
    REQUIRE(scheduler.used_blocks() <= capacity_blocks);
    std::int64_t held = 0;
    for (const auto& q : scheduler.running()) held += q.blocks;
    REQUIRE(held <= scheduler.used_blocks());  // private blocks are inside what is in use
    REQUIRE(++iterations < 2000000);
  }
  // Everything finished: nothing is in use any more (cached prefixes without users are not).
  CHECK(scheduler.used_blocks() == 0);
  CHECK(scheduler.outstanding() == 0);
  return run;
}

}  // namespace

TEST_CASE("the scheduler's KV books balance under preemption, prefix sharing and tiers", "[unit]") {
  const std::string file = test::source_path("scenarios/serving/llama3-8b-h100-fp16-kv.yaml");
  for (const std::string preemption : {"recompute", "swap"}) {
    for (const std::string tiers : {"null", "{host_memory: 4GiB}"}) {
      INFO(preemption << ", tiers " << tiers);
      const Scenario s = load_scenario_file(file, {"inference.workload.requests=300", "inference.workload.rate=30/s",
                                                   "inference.workload.shared_prefix={groups: 40, tokens: 700}",
                                                   "inference.serving.prefix_caching=true",
                                                   "inference.serving.preemption=" + preemption, "inference.tiers=" + tiers})
                             .scenario;
      // A pool of 400 blocks (6,400 tokens): preemption and eviction all the way.
      const ServingRun run = drive(s, 400);
      std::int64_t completed = 0;
      for (const auto& r : run.requests) completed += r.finish_s >= 0;
      CHECK(completed + run.rejected == 300);
      CHECK(run.preemptions + run.swaps > 0);
      CHECK(run.prefix_cache_evictions > 0);
    }
  }
}

TEST_CASE("the KV timeline stays bounded on any run length, its samples evenly spread", "[unit]") {
  ServingRun run;
  const std::int64_t iterations = 3 * static_cast<std::int64_t>(ServingRun::kMaxKvSamples) + 12345;
  for (std::int64_t i = 0; i < iterations; ++i) run.record_kv_sample(i, {static_cast<double>(i)});
  REQUIRE(run.kv_timeline.size() <= ServingRun::kMaxKvSamples);
  // Three fills: the stride doubled twice, and the samples are every fourth iteration from the first.
  CHECK(run.kv_sample_stride == 4);
  CHECK(run.kv_timeline.size() == static_cast<std::size_t>((iterations + 3) / 4));
  bool evenly_spread = true;
  for (std::size_t k = 0; k < run.kv_timeline.size(); ++k)
    evenly_spread = evenly_spread && run.kv_timeline[k].time_s == static_cast<double>(k) * 4;
  CHECK(evenly_spread);
  // Below the bound every iteration is kept.
  ServingRun short_run;
  for (std::int64_t i = 0; i < 1000; ++i) short_run.record_kv_sample(i, {static_cast<double>(i)});
  CHECK(short_run.kv_timeline.size() == 1000);
  CHECK(short_run.kv_sample_stride == 1);
}
