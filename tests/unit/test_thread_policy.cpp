// The CPU decode kernels' thread policy (kernels/cpu/thread_policy.h): which mode it chooses as the
// calls' costs change, and that either mode computes the same bits.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/cpu/thread_policy.h"
#include "kernels/kv_kernels.h"
#include "tests/unit/kv_test_data.h"

using namespace memtwin::kernels;
using memtwin::test::format;
using memtwin::test::synthetic_kv;

TEST_CASE("the decode kernels use their threads while that is cheaper than one thread, and follow the load", "[unit]") {
  using std::chrono::milliseconds;
  ThreadPolicy policy;
  const auto start = ThreadPolicy::Clock::time_point{} + std::chrono::hours(1);
  const double work = 1000;  // the same size for every call here
  // The team first; its first call, which starts the threads, is not measured.
  auto choice = policy.choose(start);
  CHECK(choice.team);
  policy.record(choice, work, 0.05);
  CHECK(policy.cost(true) == 0);
  for (int call = 0; call < ThreadPolicy::kTeamCallsFirst; ++call) {
    choice = policy.choose(start);
    REQUIRE(choice.team);
    policy.record(choice, work, 0.001);
  }
  CHECK(policy.cost(true) == Approx(1e-6));
  // Then one call alone, twice as slow where both cores are free: the team stays the choice.
  choice = policy.choose(start);
  CHECK_FALSE(choice.team);
  CHECK(choice.probe);
  policy.record(choice, work, 0.002);
  choice = policy.choose(start + milliseconds(1));
  CHECK(choice.team);
  CHECK_FALSE(choice.probe);
  // Other work takes a core: the team's calls stall for a scheduler slice, and within a few calls
  // the calling thread alone is the choice.
  int stalled = 0;
  for (; stalled < 5; ++stalled) {
    choice = policy.choose(start + milliseconds(2 + stalled));
    if (!choice.team) break;
    policy.record(choice, work, 0.008);
  }
  CHECK(stalled >= 1);
  CHECK(stalled < 5);
  CHECK(policy.cost(true) > policy.cost(false));
  // The team is tried again only once its retry interval has passed since the last probe.
  CHECK_FALSE(policy.choose(start + milliseconds(100)).team);
  // The load has gone: within a few probes, ThreadPolicy::kRetry apart, the team is back.
  auto now = start;
  bool team_back = false;
  for (int probe = 0; probe < 4 && !team_back; ++probe) {
    now += ThreadPolicy::kRetry + milliseconds(1);
    choice = policy.choose(now);
    if (choice.team && !choice.probe) {
      team_back = true;
    } else {
      REQUIRE(choice.team);  // the probe
      policy.record(choice, work, 0.001);
      team_back = policy.choose(now + milliseconds(1)).team;
    }
  }
  CHECK(team_back);
}

TEST_CASE("decode attention computes the same bits on one thread and on a team, whichever the policy chooses", "[unit]") {
  // One sequence long enough for threads (2,048 tokens x 8 KV heads): on a team its KV heads are
  // split between the threads, alone the thread attends all of them; each head's arithmetic is
  // the same. Repeated calls on two threads run on the team and, at the policy's probe, alone.
  const int kv_heads = 8, q_heads = 32, head_dim = 128, block_size = 16, context = 2048, blocks = context / block_size;
  for (KvElement e : {KvElement::fp16, KvElement::int8, KvElement::int4}) {
    INFO("bits " << format(e, head_dim, 32).bits());
    PagedShape shape{blocks, block_size, kv_heads, format(e, head_dim, 32)};
    const auto k = synthetic_kv(static_cast<std::size_t>(context) * kv_heads, head_dim, 11, true);
    const auto v = synthetic_kv(static_cast<std::size_t>(context) * kv_heads, head_dim, 12, false);
    const auto q = synthetic_kv(q_heads, head_dim, 13, false);
    std::vector<std::uint8_t> kc(shape.bytes()), vc(shape.bytes());
    std::vector<std::int32_t> table(blocks);
    std::vector<std::int64_t> slots(context);
    for (int b = 0; b < blocks; ++b) table[b] = (b * 5) % blocks;
    for (int t = 0; t < context; ++t) slots[t] = table[t / block_size] * block_size + t % block_size;
    write_paged(k.data(), slots.data(), context, shape, kc.data());
    write_paged(v.data(), slots.data(), context, shape, vc.data());
    const std::int32_t len = context;
    auto attend = [&](std::vector<float>& out) {
      decode_attention(make_decode_args(q.data(), kc.data(), vc.data(), table.data(), &len, out.data(), 1, q_heads, blocks, shape));
    };
    std::vector<float> alone(static_cast<std::size_t>(q_heads) * head_dim), shared(alone.size());
#ifdef _OPENMP
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
#else
    WARN("built without OpenMP: no team, both outputs come from one thread");
#endif
    attend(alone);
#ifdef _OPENMP
    omp_set_num_threads(2);
#endif
    for (int call = 0; call < 2 * (ThreadPolicy::kTeamCallsFirst + 2); ++call) {
      std::fill(shared.begin(), shared.end(), 0.f);
      attend(shared);
      INFO("call " << call);
      CHECK(std::memcmp(shared.data(), alone.data(), alone.size() * sizeof(float)) == 0);
    }
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
  }
}
